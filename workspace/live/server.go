package live

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/hints"
)

// Config configures a Server. Zero values are the documented defaults.
type Config struct {
	// Store is the workspace database. Required.
	Store Source
	// Hints the hub subscribes to (ChanWorkspace, published by the API,
	// the reconciler and the monitor); nil = none (the hub resyncs).
	Hints hints.Bus
	// ResyncInterval of the hub; zero = 2s.
	ResyncInterval time.Duration
	// KeepAlive is the SSE comment interval; zero = 15s.
	KeepAlive time.Duration
	// RecheckEvery is how often an open SSE stream checks its credential
	// again, ending when it is revoked, expired or logged out (auth.Watch);
	// zero = auth.DefaultRecheckEvery.
	RecheckEvery time.Duration
	// Registry receives the metrics and is served at /metrics; nil = no
	// metrics (and /metrics answers 404).
	Registry *prometheus.Registry
	// Ready, if set, is part of /readyz (e.g. the reconciler has started).
	Ready  func() error
	Logger *slog.Logger
}

// Server serves the page, SSE, metrics and probes. It has no write API of
// its own: the page calls the main HTTP API (api.API, /v1/…), so a
// click goes through the same validation and hints as the CLI. Mount it on
// that API (api.Handle("/", s)).
type Server struct {
	cfg Config
	hub *Hub
	mux *http.ServeMux
	*metrics
}

// NewServer validates cfg and builds the routes; call Run to feed the hub.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("live: Config.Store is nil")
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), metrics: newMetrics(cfg.Registry)}
	s.hub = NewHub(HubConfig{ResyncInterval: cfg.ResyncInterval, Hints: cfg.Hints, Logger: cfg.Logger, OnHint: s.observeHintLag}, cfg.Store)
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(statusCollector{s.hub})
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) { s.serveEvents(w, r, "") })
	s.mux.HandleFunc("GET /workspaces/{id}/events", func(w http.ResponseWriter, r *http.Request) { s.serveEvents(w, r, r.PathValue("id")) })
	s.mountPage()
	return s, nil
}

// Hub is the server's event hub.
func (s *Server) Hub() *Hub { return s.hub }

// ServeHTTP serves every route, each with the security headers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header(), r.TLS != nil)
	s.mux.ServeHTTP(w, r)
}

// pagePolicy is the Content-Security-Policy of everything the live server
// serves: the page loads its script, style and data from its own origin
// only (no inline code, no other origin), posts its forms only there, and
// no page may frame it.
const pagePolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// setSecurityHeaders sets the page's policy and, with tls, HSTS (a plain
// HTTP server cannot promise HTTPS; behind a TLS proxy, the proxy sets it).
func setSecurityHeaders(h http.Header, tls bool) {
	h.Set("Content-Security-Policy", pagePolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if tls {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
}

// Run feeds the hub until ctx ends.
func (s *Server) Run(ctx context.Context) error { return s.hub.Run(ctx) }

// reachable says whether src answers: its first row read, or none (not
// the whole table: a probe every few seconds must cost nothing).
func reachable(ctx context.Context, src Source) error {
	for _, err := range src.States(ctx) {
		return err
	}
	return nil
}

// readyz answers 503 with what is not ready in general terms (it is
// public); the errors themselves, which can name a database's host and
// user, go to the log.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	var problems []string
	if !s.hub.Synced() {
		problems = append(problems, "event hub has not read the store yet")
	}
	if err := reachable(r.Context(), s.cfg.Store); err != nil {
		s.cfg.Logger.Error("live: readyz: store", "err", err)
		problems = append(problems, "store unavailable")
	}
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(); err != nil {
			s.cfg.Logger.Error("live: readyz", "err", err)
			problems = append(problems, "server not ready")
		}
	}
	if len(problems) > 0 {
		http.Error(w, strings.Join(problems, "\n"), http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ready\n")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func isNotFound(err error) bool { return errors.Is(err, workspace.ErrNotFound) }

// writeError answers err as JSON; a 500 says no more than that (the
// error, maybe the store's, goes to the log).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	switch {
	case isNotFound(err):
		code = http.StatusNotFound
	case errors.Is(err, workspace.ErrBadInput):
		code = http.StatusBadRequest
	case errors.Is(err, workspace.ErrNameTaken), errors.Is(err, workspace.ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, auth.ErrNoToken):
		code = http.StatusUnauthorized
	}
	msg := err.Error()
	if code == http.StatusInternalServerError {
		s.cfg.Logger.Error("live: "+r.URL.Path, "err", err)
		msg = "internal error (details in the server's log)"
	}
	writeJSON(w, code, map[string]string{"error": msg})
}
