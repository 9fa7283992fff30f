// Package taskqotel traces taskq with OpenTelemetry.
//
// EnqueueMiddleware (for a taskq.Client) starts a producer span
// "send <queue>" around every enqueue and writes its trace context into the
// task's headers; Middleware (for a taskq.Worker) reads it back and runs the
// handler in a consumer span "process <queue>", a child of the enqueue's
// span. One trace thus runs from the request that enqueued a task, in one
// process, to its handler in another, with the time the task waited in
// between. Spans follow OpenTelemetry's semantic conventions for messaging
// (messaging.system "taskq", messaging.destination.name = the queue,
// messaging.operation.type send/process, messaging.message.id = the task
// id) plus taskq.tenant and taskq.attempt.
//
//	c.Use(taskqotel.EnqueueMiddleware(taskqotel.Config{}))
//	w.Use(taskqotel.Middleware(taskqotel.Config{}))
package taskqotel

import (
	"context"
	"fmt"
	"maps"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/gantryhq/gantry/taskq"
)

// ScopeName is the instrumentation scope of taskq's spans.
const ScopeName = "github.com/gantryhq/gantry/taskq/taskqotel"

// Config selects where spans go and how their context travels.
type Config struct {
	// TracerProvider defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator defaults to W3C trace context and baggage (the global
	// propagator is a no-op until a program sets one, and a task's trace
	// must reach the worker either way).
	Propagator propagation.TextMapPropagator
}

func (c Config) tracer() trace.Tracer {
	tp := c.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

func (c Config) propagator() propagation.TextMapPropagator {
	if c.Propagator != nil {
		return c.Propagator
	}
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

var system = semconv.MessagingSystemKey.String("taskq")

// EnqueueMiddleware traces enqueues and carries the trace to the worker in
// the task's headers. The caller's Task is not modified.
func EnqueueMiddleware(cfg Config) taskq.EnqueueMiddleware {
	tr, prop := cfg.tracer(), cfg.propagator()
	return func(next taskq.EnqueueFunc) taskq.EnqueueFunc {
		return func(ctx context.Context, t *taskq.Task, opts ...taskq.Option) (*taskq.TaskInfo, error) {
			q := taskq.QueueOf(t, opts...)
			ctx, span := tr.Start(ctx, "send "+q, trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithAttributes(system, semconv.MessagingDestinationName(q), semconv.MessagingOperationTypeSend,
					semconv.MessagingOperationName("enqueue"), attribute.String("taskq.type", t.Type),
					semconv.MessagingMessageBodySize(len(t.Payload))))
			defer span.End()
			tc := *t
			tc.Headers = make(map[string]string, len(t.Headers)+2)
			maps.Copy(tc.Headers, t.Headers)
			prop.Inject(ctx, propagation.MapCarrier(tc.Headers))
			info, err := next(ctx, &tc, opts...)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				return info, err
			}
			span.SetAttributes(semconv.MessagingMessageID(info.ID), attribute.String("taskq.tenant", info.Tenant))
			return info, nil
		}
	}
}

// Middleware runs every handler in a consumer span that continues the
// trace its task was enqueued in; the handler's ctx carries the span.
func Middleware(cfg Config) taskq.Middleware {
	tr, prop := cfg.tracer(), cfg.propagator()
	return func(next taskq.HandlerFunc) taskq.HandlerFunc {
		return func(ctx context.Context, t *taskq.Task) error {
			if len(t.Headers) > 0 {
				ctx = prop.Extract(ctx, propagation.MapCarrier(t.Headers))
			}
			ctx, span := tr.Start(ctx, "process "+t.Queue(), trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(system, semconv.MessagingDestinationName(t.Queue()), semconv.MessagingOperationTypeProcess,
					semconv.MessagingOperationName("process"), semconv.MessagingMessageID(t.ID()),
					attribute.String("taskq.type", t.Type), attribute.String("taskq.tenant", t.Tenant()),
					attribute.Int("taskq.attempt", t.Attempt())))
			defer span.End()
			err := next(ctx, t)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				span.SetAttributes(semconv.ErrorTypeKey.String(fmt.Sprintf("%T", err))) // low cardinality: the type, not the text
			}
			return err
		}
	}
}
