package cli

import (
	"context"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/gantryhq/gantry/taskq/taskqotel"
)

// queueTracing turns tracing on for a queue command when the standard
// OpenTelemetry variable OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) names a collector: spans go there over
// OTLP/HTTP, with the exporter's other OTEL_EXPORTER_OTLP_* settings and
// OTEL_SERVICE_NAME (default service). ok is false when tracing is off;
// flush sends what is buffered and must run before the command returns.
func queueTracing(ctx context.Context, log *slog.Logger, service string) (cfg taskqotel.Config, flush func(), ok bool, err error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return cfg, func() {}, false, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return cfg, nil, false, err
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service)), resource.WithFromEnv())
	if err != nil {
		return cfg, nil, false, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	flush = func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: could not send the last spans", "err", err)
		}
	}
	return taskqotel.Config{TracerProvider: tp}, flush, true, nil
}
