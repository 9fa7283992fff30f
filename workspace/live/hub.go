// Package live is the operators' surface of the workspace reconciler: a
// stream of committed state changes (SSE), the embedded web page, Prometheus
// metrics and health probes, served by `gantry ws serve`.
//
// Tour:
//
//	hub.go      Hub: one poller per process turns hints + a periodic resync
//	            into ordered per-workspace change events for all subscribers
//	view.go     View: what an event says about a workspace (never its spec),
//	            encoded once per change for every subscriber
//	sse.go      GET /events, GET /workspaces/{id}/events (text/event-stream):
//	            the whole state (Sub.Initial), "synced", then the changes
//	page.go     GET / and /static/: the embedded page (plain HTML/JS/CSS); it
//	            drives the main HTTP API (/v1/workspaces…, api.API), the
//	            same endpoints and validation the CLI uses
//	server.go   Server: the routes above, mounted by `gantry ws serve` on the API
//	metrics.go  Prometheus collectors, /healthz, /readyz
//
// Why a hub and not a query per client: a hint says only "row id changed";
// the hub reads the row once, compares it with the last version it sent and
// broadcasts the difference, so N browsers cost one read and one encoding
// of a View of a few hundred bytes. Hints are only an accelerator: every
// ResyncInterval the hub re-reads all rows, so a dropped hint (or hints
// switched off) delays an event by at most one resync and never loses a
// state that lasted longer than that.
package live

import (
	"context"
	"iter"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store"
)

// Event is one committed change of a workspace as streamed to clients.
type Event struct {
	Seq       uint64 `json:"seq"`                 // hub-wide, increasing
	Type      string `json:"type"`                // "state" or "deleted"
	Workspace *View  `json:"workspace,omitempty"` // read-only: shared by every subscriber
	ID        string `json:"id"`
	// Owner is the workspace's owner (also on "deleted" events): the hub
	// gives a subscriber only the events of owners it may see.
	Owner string `json:"-"`
	// tail is the JSON after `{"seq":N`, encoded once by the hub for
	// every subscriber; nil = encode the event (Data).
	tail []byte
}

// Data is e's JSON, as the data line of its SSE event.
func (e Event) Data() []byte {
	if e.tail == nil {
		e.tail = eventTail(e)
	}
	b := make([]byte, 0, len(seqZero)+20+len(e.tail))
	b = append(b, seqZero[:len(seqZero)-1]...)
	b = strconv.AppendUint(b, e.Seq, 10)
	return append(b, e.tail...)
}

// Source is what the hub reads: the store in production. Lookup resolves a
// stream's {id} among one owner's workspaces ("" = any owner's).
type Source interface {
	// States yields every workspace, its spec left out if the source
	// likes (a View has none), and a read error last (store.States).
	States(ctx context.Context) iter.Seq2[workspace.Workspace, error]
	Get(ctx context.Context, id string) (workspace.Workspace, error)
	Lookup(ctx context.Context, ref, owner string) (workspace.Workspace, error)
}

var _ Source = (*store.Store)(nil)

// HubConfig configures a Hub. Zero values are the documented defaults.
type HubConfig struct {
	// ResyncInterval is how often every row is re-read, at the most: a
	// resync of resyncSpacedRows rows or more that took d waits at least
	// resyncSpacing·d before the next, so that it costs at most about a
	// tenth of a core however many workspaces there are (100,000 rows
	// take a few hundred milliseconds to read); a smaller table, whose
	// read costs nothing, keeps the interval however loaded the machine.
	// Zero = 2s.
	ResyncInterval time.Duration
	// Hints feeds row-changed ids (ChanWorkspace and ChanWorkspaceUrgent);
	// nil = resync only.
	Hints hints.Bus
	// Buffer is each subscriber's queue of changes (the initial state is
	// not queued: Sub.Initial); a subscriber that falls this far behind is
	// dropped (its stream ends; EventSource reconnects and gets the whole
	// state again). Zero = 1024.
	Buffer int
	// OnHint, if set, is called with the lag from a row's commit
	// (updated_at) to the hub reading it after a hint (for metrics).
	OnHint func(lag time.Duration)
	Logger *slog.Logger
}

// Hub fans committed workspace changes out to subscribers. It keeps each
// workspace's View, not its row: what it holds and sends does not grow with
// a workspace's spec.
type Hub struct {
	cfg HubConfig
	src Source

	// mu protects the fields below.
	mu     sync.Mutex
	seq    uint64
	last   map[string]*entry // what subscribers were last told, by id
	snap   []*entry          // last's entries by id, shared by subscribers; nil = stale
	subs   map[*Sub]struct{}
	synced bool // a first full read succeeded
	// gen counts resyncs: each entry's gen is the resync (or the one in
	// progress) that last saw its row; one a resync did not see and no
	// hint refreshed since it began is a deleted row.
	gen uint64
	// gone: the rows deleted (by a hint's refresh) while a resync read
	// the table, which its older read must not bring back; nil when no
	// resync is reading.
	gone map[string]bool

	views []View // the resync's buffer, reused (Run's goroutine only)
}

// resyncSpacing: a resync of resyncSpacedRows rows or more waits at least
// this many times as long as the last one took (HubConfig.ResyncInterval).
const (
	resyncSpacing    = 10
	resyncSpacedRows = 1000
)

// Sub is one subscriber. C carries the changes after Initial; it closes
// when the hub drops the subscriber or it cancels.
type Sub struct {
	C       <-chan Event
	c       chan Event
	id      string // "" = all workspaces
	may     func(owner string) bool
	closed  bool
	initial []*entry // the state at Subscribe (read-only, maybe shared)
	seq     uint64   // the hub's seq at Subscribe
}

// Initial yields the state at Subscribe: one "state" event (with the seq
// of that moment) for each workspace the subscriber may see, every one of
// them however many there are. Changes after it come on C.
func (s *Sub) Initial() iter.Seq[Event] {
	return func(yield func(Event) bool) {
		for _, e := range s.initial {
			if !s.may(e.view.Owner) {
				continue
			}
			if !yield(e.event(s.seq)) {
				return
			}
		}
	}
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
	return &Hub{cfg: cfg, src: src, last: map[string]*entry{}, subs: map[*Sub]struct{}{}}
}

// Synced reports whether the hub has read the store at least once (readiness).
func (h *Hub) Synced() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.synced
}

// Snapshot returns the workspaces as last broadcast, by id.
func (h *Hub) Snapshot() []View {
	h.mu.Lock()
	snap := h.snapshotLocked()
	h.mu.Unlock()
	out := make([]View, len(snap))
	for i, e := range snap {
		out[i] = e.view
	}
	return out
}

// snapshotLocked returns last's entries by id, made once per change and
// shared by every subscriber until the next one.
func (h *Hub) snapshotLocked() []*entry {
	if h.snap == nil {
		h.snap = make([]*entry, 0, len(h.last))
		for _, e := range h.last {
			h.snap = append(h.snap, e)
		}
		slices.SortFunc(h.snap, func(a, b *entry) int { return strings.Compare(a.view.ID, b.view.ID) })
	}
	return h.snap
}

// Subscribe registers a subscriber for one workspace (id) or all (""),
// of the owners may accepts (nil = every owner). Its Initial is the
// current state (one event per workspace), then C carries the changes.
func (h *Hub) Subscribe(id string, may func(owner string) bool) (*Sub, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if may == nil {
		may = func(string) bool { return true }
	}
	s := &Sub{c: make(chan Event, h.cfg.Buffer), id: id, may: may, seq: h.seq}
	s.C = s.c
	if id == "" {
		s.initial = h.snapshotLocked()
	} else if e, ok := h.last[id]; ok {
		s.initial = []*entry{e}
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
	t := time.NewTimer(h.resync(ctx))
	defer t.Stop()
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
			t.Reset(h.resync(ctx))
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
	v := ViewOf(w)
	h.mu.Lock()
	h.updateLocked(v)
	h.mu.Unlock()
}

// resync reads every row and broadcasts what changed since the hub last
// saw it, and the rows gone; it returns how long to wait for the next.
func (h *Hub) resync(ctx context.Context) time.Duration {
	t0 := time.Now()
	h.mu.Lock()
	h.gen++
	start := h.gen
	h.gone = map[string]bool{}
	h.mu.Unlock()
	views := h.views[:0]
	var err error
	for w, rerr := range h.src.States(ctx) {
		if err = rerr; err != nil {
			break
		}
		views = append(views, ViewOf(w))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	gone := h.gone
	h.gone = nil
	if err != nil {
		h.cfg.Logger.Warn("live: resync", "err", err)
		return h.cfg.ResyncInterval
	}
	h.synced = true
	h.gen++
	for _, v := range views {
		if !gone[v.ID] {
			h.updateLocked(v)
		}
	}
	for id, e := range h.last {
		if e.gen < start {
			h.deletedLocked(id)
		}
	}
	clear(views) // drop the rows' pointers until the next resync
	h.views = views
	if len(views) < resyncSpacedRows {
		return h.cfg.ResyncInterval
	}
	return max(h.cfg.ResyncInterval, resyncSpacing*time.Since(t0))
}

// updateLocked takes v, read now (a resync or a hint's refresh), and
// broadcasts it if it changed.
func (h *Hub) updateLocked(v View) {
	old, ok := h.last[v.ID]
	if ok {
		old.gen = h.gen // its row is still there
	}
	if ok && !changed(old.view, v) {
		return
	}
	if ok && v.UpdatedAt.Before(old.view.UpdatedAt) {
		return // a slower read of an older row version
	}
	e := newEntry(v)
	e.gen = h.gen
	h.last[v.ID] = e
	h.snap = nil
	h.seq++
	h.broadcastLocked(e.event(h.seq))
}

func (h *Hub) deletedLocked(id string) {
	if h.gone != nil {
		h.gone[id] = true
	}
	owner := h.last[id].view.Owner
	delete(h.last, id)
	h.snap = nil
	h.seq++
	e := Event{Type: "deleted", ID: id, Owner: owner}
	e.tail = eventTail(e)
	e.Seq = h.seq
	h.broadcastLocked(e)
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
