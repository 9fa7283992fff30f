package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gantryhq/gantry/workspace"
)

// Config configures a Server. Zero values are the documented defaults.
type Config struct {
	// Store is the workspace database. Required.
	Store *workspace.Store
	// Hints: published to after API writes, and subscribed to by the hub;
	// nil = none (the hub resyncs).
	Hints workspace.Hints
	// ResyncInterval of the hub; zero = 2s.
	ResyncInterval time.Duration
	// KeepAlive is the SSE comment interval; zero = 15s.
	KeepAlive time.Duration
	// Registry receives the metrics and is served at /metrics; nil = no
	// metrics (and /metrics answers 404).
	Registry *prometheus.Registry
	// Ready, if set, is part of /readyz (e.g. the reconciler has started).
	Ready func() error
	// Now is the clock for API writes; nil = time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Server serves the page, the JSON API the page uses, SSE, metrics and probes.
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), metrics: newMetrics(cfg.Registry)}
	s.hub = NewHub(HubConfig{ResyncInterval: cfg.ResyncInterval, Hints: cfg.Hints, Logger: cfg.Logger, OnHint: s.observeHintLag, OnEvent: s.observeEvent}, cfg.Store)
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(statusCollector{s.hub})
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) { s.serveEvents(w, r, "") })
	s.mux.HandleFunc("GET /workspaces/{id}/events", func(w http.ResponseWriter, r *http.Request) { s.serveEvents(w, r, r.PathValue("id")) })
	s.mux.HandleFunc("GET /workspaces", s.list)
	s.mux.HandleFunc("POST /workspaces", s.create)
	s.mux.HandleFunc("POST /workspaces/{id}/desired", s.setDesired)
	s.mux.HandleFunc("POST /workspaces/{id}/touch", s.touch)
	s.mux.HandleFunc("POST /workspaces/{id}/recover", s.recover)
	s.mux.HandleFunc("DELETE /workspaces/{id}", s.delete)
	s.mountPage()
	return s, nil
}

// Hub is the server's event hub.
func (s *Server) Hub() *Hub { return s.hub }

// ServeHTTP serves every route.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Run feeds the hub until ctx ends.
func (s *Server) Run(ctx context.Context) error { return s.hub.Run(ctx) }

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	var problems []string
	if !s.hub.Synced() {
		problems = append(problems, "event hub has not read the store yet")
	}
	if _, err := s.cfg.Store.List(r.Context()); err != nil {
		problems = append(problems, "store: "+err.Error())
	}
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(); err != nil {
			problems = append(problems, err.Error())
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

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case isNotFound(err):
		code = http.StatusNotFound
	case errors.Is(err, workspace.ErrBadInput):
		code = http.StatusBadRequest
	case errors.Is(err, workspace.ErrNameTaken), errors.Is(err, workspace.ErrConflict):
		code = http.StatusConflict
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	ws, err := s.cfg.Store.List(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].Name < ws[j].Name })
	writeJSON(w, http.StatusOK, ws)
}

// changedRow tells the reconciler (hint) and the hub (poke) at once.
func (s *Server) changedRow(ctx context.Context, id string) {
	if s.cfg.Hints != nil {
		s.cfg.Hints.Publish(ctx, workspace.ChanWorkspace, id)
	}
	s.hub.Poke(ctx, id)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var n workspace.NewWorkspace
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&n); err != nil {
		writeError(w, fmt.Errorf("%w: request body: %v (want JSON {\"name\": …})", workspace.ErrBadInput, err))
		return
	}
	ws, err := s.cfg.Store.Create(r.Context(), n, s.cfg.Now())
	if err != nil {
		writeError(w, err)
		return
	}
	s.changedRow(r.Context(), ws.ID)
	writeJSON(w, http.StatusCreated, ws)
}

func (s *Server) setDesired(w http.ResponseWriter, r *http.Request) {
	var body struct {
		State string `json:"desired_state"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<12)).Decode(&body); err != nil {
		writeError(w, fmt.Errorf("%w: request body: %v (want {\"desired_state\": \"RUNNING\"})", workspace.ErrBadInput, err))
		return
	}
	st, err := workspace.ParseDesired(body.State)
	if err != nil {
		writeError(w, err)
		return
	}
	ws, err := s.cfg.Store.SetDesired(r.Context(), r.PathValue("id"), st, s.cfg.Now())
	if err != nil {
		writeError(w, err)
		return
	}
	s.changedRow(r.Context(), ws.ID)
	writeJSON(w, http.StatusOK, ws)
}

func (s *Server) touch(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.cfg.Store.Touch(r.Context(), id, s.cfg.Now()); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) recover(w http.ResponseWriter, r *http.Request) {
	ws, err := s.cfg.Store.Recover(r.Context(), r.PathValue("id"), s.cfg.Now())
	if err != nil {
		writeError(w, err)
		return
	}
	if s.cfg.Hints != nil {
		s.cfg.Hints.Publish(r.Context(), workspace.ChanMonitor, ws.ID)
	}
	s.changedRow(r.Context(), ws.ID)
	writeJSON(w, http.StatusOK, ws)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	ws, err := s.cfg.Store.SetDesired(r.Context(), r.PathValue("id"), workspace.Deleted, s.cfg.Now())
	if err != nil {
		writeError(w, err)
		return
	}
	s.changedRow(r.Context(), ws.ID)
	writeJSON(w, http.StatusAccepted, ws)
}
