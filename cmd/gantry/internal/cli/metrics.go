package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// registerer is env's registry as a prometheus.Registerer, or nil when
// there is none (a nil *Registry in the interface would not be nil).
func (env *Env) registerer() prometheus.Registerer {
	if env.Registry == nil {
		return nil
	}
	return env.Registry
}

// route is one extra handler a daemon serves beside /metrics (e.g. /healthz).
type route struct {
	pattern string
	handler http.Handler
}

// serveMetrics serves env's registry at http://addr/metrics, plus the extra
// routes, until the returned stop is called. An empty addr serves nothing.
func serveMetrics(env *Env, addr string, extra ...route) (stop func(), err error) {
	if addr == "" || (env.Registry == nil && len(extra) == 0) {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	if env.Registry != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(env.Registry, promhttp.HandlerOpts{}))
	}
	for _, r := range extra {
		mux.Handle(r.pattern, r.handler)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			env.Logger.Error("metrics server", "err", err)
		}
	}()
	fmt.Fprintf(env.Stderr, "metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}
