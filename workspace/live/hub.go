// Package live is the operators' surface of the workspace reconciler: a
// stream of committed state changes (SSE), the embedded web page, Prometheus
// metrics and health probes, served by `gantry ws serve`.
//
// Tour:
//
//	hub.go      Hub: one poller per process turns hints + a periodic resync
//	            into ordered per-workspace change events for all subscribers
//	sse.go      GET /events, GET /workspaces/{id}/events (text/event-stream)
//	page.go     GET / and /static/: the embedded page (plain HTML/JS/CSS); it
//	            drives the main HTTP API (/v1/workspaces…, api.API), the
//	            same endpoints and validation the CLI uses
//	server.go   Server: the routes above, mounted by `gantry ws serve` on the API
//	metrics.go  Prometheus collectors, /healthz, /readyz
//
// Why a hub and not a query per client: a hint says only "row id changed";
// the hub reads the row once, compares it with the last version it sent and
// broadcasts the difference, so N browsers cost one read. Hints are only an
// accelerator: every ResyncInterval the hub re-reads all rows, so a dropped
// hint (or hints switched off) delays an event by at most one resync and
// never loses a state that lasted longer than that.
package live

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store"
)

// Event is one committed change of a workspace as streamed to clients.
type Event struct {
	Seq       uint64               `json:"seq"`  // hub-wide, increasing
	Type      string               `json:"type"` // "state" or "deleted"
	Workspace *workspace.Workspace `json:"workspace,omitempty"`
	ID        string               `json:"id"`
	// Owner is the workspace's owner (also on "deleted" events): the hub
	// gives a subscriber only the events of owners it may see.
	Owner string `json:"-"`
}

// Source is what the hub reads: the store in production. Lookup resolves a
// stream's {id} among one owner's workspaces ("" = any owner's).
type Source interface {
	List(ctx context.Context) ([]workspace.Workspace, error)
	Get(ctx context.Context, id string) (workspace.Workspace, error)
	Lookup(ctx context.Context, ref, owner string) (workspace.Workspace, error)
}

var _ Source = (*store.Store)(nil)

// HubConfig configures a Hub. Zero values are the documented defaults.
type HubConfig struct {
	// ResyncInterval is how often every row is re-read; zero = 2s.
	ResyncInterval time.Duration
	// Hints feeds row-changed ids (ChanWorkspace and ChanWorkspaceUrgent);
	// nil = resync only.
	Hints hints.Bus
	// Buffer is each subscriber's queue; a subscriber that falls this far
	// behind is dropped (its stream ends; EventSource reconnects). Zero = 1024.
	Buffer int
	// OnHint, if set, is called with the lag from a row's commit
	// (updated_at) to the hub reading it after a hint (for metrics).
	OnHint func(lag time.Duration)
	Logger *slog.Logger
}

// Hub fans committed workspace changes out to subscribers.
type Hub struct {
	cfg HubConfig
	src Source

	// mu protects the fields below.
	mu     sync.Mutex
	seq    uint64
	last   map[string]workspace.Workspace // what subscribers were last told
	subs   map[*Sub]struct{}
	synced bool // a first full read succeeded
}

// Sub is one subscriber. C closes when the hub drops it or it cancels.
type Sub struct {
	C      <-chan Event
	c      chan Event
	id     string // "" = all workspaces
	may    func(owner string) bool
	closed bool
}

// NewHub returns a hub over src; call Run.
func NewHub(cfg HubConfig, src Source) *Hub {
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = 2 * time.Second
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 1024
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Hub{cfg: cfg, src: src, last: map[string]workspace.Workspace{}, subs: map[*Sub]struct{}{}}
}

// Synced reports whether the hub has read the store at least once (readiness).
func (h *Hub) Synced() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.synced
}

// Snapshot returns the workspaces as last broadcast.
func (h *Hub) Snapshot() []workspace.Workspace {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]workspace.Workspace, 0, len(h.last))
	for _, w := range h.last {
		out = append(out, w)
	}
	return out
}

// Subscribe registers a subscriber for one workspace (id) or all (""),
// of the owners may accepts (nil = every owner). The first events are the
// current state (one per workspace), then changes.
func (h *Hub) Subscribe(id string, may func(owner string) bool) (*Sub, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if may == nil {
		may = func(string) bool { return true }
	}
	s := &Sub{c: make(chan Event, h.cfg.Buffer), id: id, may: may}
	s.C = s.c
	for wid, w := range h.last {
		if (id == "" || id == wid) && may(w.Owner) {
			w := w
			if len(s.c) < cap(s.c) {
				s.c <- Event{Seq: h.seq, Type: "state", Workspace: &w, ID: wid, Owner: w.Owner}
			}
		}
	}
	h.subs[s] = struct{}{}
	return s, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.dropLocked(s)
	}
}

func (h *Hub) dropLocked(s *Sub) {
	if !s.closed {
		s.closed = true
		delete(h.subs, s)
		close(s.c)
	}
}

// Poke re-reads one workspace now (the API calls it after a write, so the
// page updates even with hints off).
func (h *Hub) Poke(ctx context.Context, id string) { h.refresh(ctx, id) }

// Run reads the store on hints and every ResyncInterval until ctx ends.
func (h *Hub) Run(ctx context.Context) error {
	var plain, urgent <-chan string
	if h.cfg.Hints != nil {
		c, cancel := h.cfg.Hints.Subscribe(hints.ChanWorkspace)
		defer cancel()
		u, cancelUrgent := h.cfg.Hints.Subscribe(hints.ChanWorkspaceUrgent)
		defer cancelUrgent()
		plain, urgent = c, u
	}
	t := time.NewTicker(h.cfg.ResyncInterval)
	defer t.Stop()
	h.resync(ctx)
	for {
		select {
		case <-ctx.Done():
			h.mu.Lock()
			for s := range h.subs {
				h.dropLocked(s)
			}
			h.mu.Unlock()
			return nil
		case id := <-urgent:
			h.refresh(ctx, id)
		case id := <-plain:
			h.refresh(ctx, id)
		case <-t.C:
			h.resync(ctx)
		}
	}
}

func (h *Hub) refresh(ctx context.Context, id string) {
	w, err := h.src.Get(ctx, id)
	if err != nil {
		h.mu.Lock()
		if _, ok := h.last[id]; ok && isNotFound(err) {
			h.deletedLocked(id)
		}
		h.mu.Unlock()
		return
	}
	if h.cfg.OnHint != nil {
		h.cfg.OnHint(time.Since(w.UpdatedAt))
	}
	h.mu.Lock()
	h.updateLocked(w)
	h.mu.Unlock()
}

func (h *Hub) resync(ctx context.Context) {
	ws, err := h.src.List(ctx)
	if err != nil {
		h.cfg.Logger.Warn("live: resync", "err", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.synced = true
	seen := make(map[string]bool, len(ws))
	for _, w := range ws {
		seen[w.ID] = true
		h.updateLocked(w)
	}
	for id := range h.last {
		if !seen[id] {
			h.deletedLocked(id)
		}
	}
}

// changed says whether b differs from a in anything a user sees.
func changed(a, b workspace.Workspace) bool {
	if a.ObservedStatus != b.ObservedStatus || a.DesiredState != b.DesiredState || a.Operation != b.Operation ||
		a.ErrorCount != b.ErrorCount || a.ArchiveKey != b.ArchiveKey || (a.ErrorInfo == nil) != (b.ErrorInfo == nil) {
		return true
	}
	return a.ErrorInfo != nil && *a.ErrorInfo != *b.ErrorInfo
}

func (h *Hub) updateLocked(w workspace.Workspace) {
	old, ok := h.last[w.ID]
	if ok && !changed(old, w) {
		return
	}
	if ok && w.UpdatedAt.Before(old.UpdatedAt) {
		return // a slower read of an older row version
	}
	h.last[w.ID] = w
	h.seq++
	h.broadcastLocked(Event{Seq: h.seq, Type: "state", Workspace: &w, ID: w.ID, Owner: w.Owner})
}

func (h *Hub) deletedLocked(id string) {
	owner := h.last[id].Owner
	delete(h.last, id)
	h.seq++
	h.broadcastLocked(Event{Seq: h.seq, Type: "deleted", ID: id, Owner: owner})
}

func (h *Hub) broadcastLocked(e Event) {
	for s := range h.subs {
		if s.id != "" && s.id != e.ID || !s.may(e.Owner) {
			continue
		}
		select {
		case s.c <- e:
		default:
			h.cfg.Logger.Warn("live: dropping a slow subscriber", "buffer", h.cfg.Buffer)
			h.dropLocked(s)
		}
	}
}
