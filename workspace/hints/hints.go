// Package hints carries the workspace hints: "this workspace's row changed"
// and "observe this workspace now". A hint only speeds things up (every
// component also polls), so a dropped hint costs latency, never
// correctness.
//
// Bus is the interface; Local is the in-process hub (SQLite mode), Drop
// drops everything (tests: polling alone must converge), Postgres uses
// LISTEN/NOTIFY and Redis pub/sub (rueidis, the client taskq uses).
package hints

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/rueidis"
)

// Hint channels (the first two are the seed's names). A hint carries a
// workspace id.
//
// The urgent channels carry the same hints for work a user asked for
// directly (an API call): the reconciler and the monitor serve them ahead of
// the plain channels, which a TTL pass or a resync after a restart may fill
// with 100,000 ids. Each subscriber of a channel has its own queue, so an
// urgent hint never waits behind a plain one.
const (
	ChanMonitor   = "monitor:trigger" // "observe this workspace now"
	ChanWorkspace = "workspace"       // "this workspace's row changed" (Redis: workspace:{id})

	ChanMonitorUrgent   = "monitor-urgent"   // ChanMonitor, for work a user asked for
	ChanWorkspaceUrgent = "workspace-urgent" // ChanWorkspace, for work a user asked for

	// ChanPool carries a template's name: "its warm pool lost a member
	// (a claim): refill it now", for the leader's pool filler, which
	// otherwise looks every --pool-interval.
	ChanPool = "pool"
)

// UrgentTwin is the urgent channel that carries channel's hints for work a
// user asked for (channel itself if it is one).
func UrgentTwin(channel string) string {
	switch channel {
	case ChanMonitor:
		return ChanMonitorUrgent
	case ChanWorkspace:
		return ChanWorkspaceUrgent
	}
	return channel
}

func isUrgent(channel string) bool {
	return channel == ChanMonitorUrgent || channel == ChanWorkspaceUrgent
}

// Bus publishes and delivers hints.
type Bus interface {
	Publish(ctx context.Context, channel, id string) error
	// Subscribe returns a channel of ids published on channel (from any
	// replica, for the remote implementations) and a cancel func.
	Subscribe(channel string) (<-chan string, func())
}

// Local is the in-process hub (SQLite mode). Delivery never blocks and
// never drops: each subscriber holds the set of ids published and not yet
// taken, each once (a hint for an id already pending merges with it), and
// one goroutine feeds them to the subscriber in the order they were first
// published. A burst of hints (a TTL pass archiving a night's idle
// workspaces, 100,000 rows changed at once) costs memory per distinct
// pending id, never a lost hint that would leave its workspace waiting for
// the next poll.
type Local struct {
	// mu protects subs.
	mu   sync.Mutex
	subs map[string]map[*sub]struct{}
}

var _ Bus = (*Local)(nil)

// NewLocal returns an empty hub.
func NewLocal() *Local { return &Local{subs: map[string]map[*sub]struct{}{}} }

// Publish delivers id to every subscriber of channel.
func (h *Local) Publish(_ context.Context, channel, id string) error {
	h.deliver(channel, id)
	return nil
}

func (h *Local) deliver(channel, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[channel] {
		s.add(id)
	}
}

// Subscribe registers a subscriber; cancel stops its feeding goroutine.
func (h *Local) Subscribe(channel string) (<-chan string, func()) {
	s := &sub{pendingSet: newPendingSet(), out: make(chan string, 1024), done: make(chan struct{})}
	go s.feed()
	h.mu.Lock()
	if h.subs[channel] == nil {
		h.subs[channel] = map[*sub]struct{}{}
	}
	h.subs[channel][s] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return s.out, func() {
		h.mu.Lock()
		delete(h.subs[channel], s)
		h.mu.Unlock()
		once.Do(func() { close(s.done) })
	}
}

// sub is one subscriber of a Local hub.
type sub struct {
	*pendingSet
	out  chan string
	done chan struct{} // closed by cancel
}

// pendingSet is a FIFO set of ids: an id added while pending merges with
// it.
type pendingSet struct {
	// mu protects pending and order.
	// Invariant: pending holds exactly the ids in order (each once).
	mu      sync.Mutex
	pending map[string]struct{}
	order   []string
	kick    chan struct{} // buffered 1: "order may be non-empty"
}

func newPendingSet() *pendingSet {
	return &pendingSet{pending: map[string]struct{}{}, kick: make(chan struct{}, 1)}
}

func (s *pendingSet) add(id string) {
	s.mu.Lock()
	if _, ok := s.pending[id]; !ok {
		s.pending[id] = struct{}{}
		s.order = append(s.order, id)
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// take removes and returns the pending ids. An id published again after
// this is pending again: the receiver may already have read its row.
func (s *pendingSet) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.order
	s.order = nil
	for _, id := range ids {
		delete(s.pending, id)
	}
	return ids
}

// feed sends the pending ids to out until cancelled.
func (s *sub) feed() {
	for {
		select {
		case <-s.kick:
		case <-s.done:
			return
		}
		for ids := s.take(); len(ids) > 0; ids = s.take() {
			for _, id := range ids {
				select {
				case s.out <- id:
				case <-s.done:
					return
				}
			}
		}
	}
}

// Drop drops every hint (tests: the poll alone must converge).
type Drop struct{}

func (Drop) Publish(context.Context, string, string) error { return nil }
func (Drop) Subscribe(string) (<-chan string, func()) {
	return make(chan string), func() {}
}

// Postgres uses Postgres NOTIFY (sent with the pool) and LISTEN (on one
// dedicated connection, reconnected after errors). Run must be running for
// Subscribe to receive anything.
//
// While Run runs, plain hints are sent in batches, many NOTIFYs in one
// statement (Publish only queues them, merging an id already queued): a
// burst of 100,000 hints costs a hundred round trips, not 100,000 that
// would hold the connection pool every user's request needs. Urgent hints
// are sent at once, alone.
type Postgres struct {
	DB     *sql.DB
	DSN    string
	Logger *slog.Logger
	local  *Local
	once   sync.Once
	// outbox queues the plain hints while Run runs (nil otherwise); its
	// entries are channel + "\x00" + id.
	outbox atomic.Pointer[pendingSet]
}

// notifyBatch bounds the hints one NOTIFY statement sends.
const notifyBatch = 1000

var _ Bus = (*Postgres)(nil)

// pgChannel is channel c as a Postgres identifier (no quoting needed).
func pgChannel(c string) string { return "gantry_" + pgIdent.Replace(c) }

var pgIdent = strings.NewReplacer(":", "_", "-", "_")

func (h *Postgres) hub() *Local {
	h.once.Do(func() { h.local = NewLocal() })
	return h.local
}

// Publish sends NOTIFY (delivered at commit, to every replica): an urgent
// hint at once, a plain one with the next batch while Run runs.
func (h *Postgres) Publish(ctx context.Context, channel, id string) error {
	if ob := h.outbox.Load(); ob != nil && !isUrgent(channel) {
		ob.add(channel + "\x00" + id)
		return nil
	}
	_, err := h.DB.ExecContext(ctx, `SELECT pg_notify($1, $2)`, pgChannel(channel), id)
	return err
}

// send sends the hints queued in ob, in batches, until ctx ends.
func (h *Postgres) send(ctx context.Context, ob *pendingSet, log *slog.Logger) {
	for {
		select {
		case <-ob.kick:
		case <-ctx.Done():
			return
		}
		for keys := ob.take(); len(keys) > 0; keys = ob.take() {
			for len(keys) > 0 {
				n := min(len(keys), notifyBatch)
				if err := h.notify(ctx, keys[:n]); err != nil && ctx.Err() == nil {
					log.Warn("workspace: NOTIFY failed; polling covers the gap", "hints", n, "err", err)
				}
				keys = keys[n:]
			}
		}
	}
}

// notify sends keys (channel NUL id) as one statement.
func (h *Postgres) notify(ctx context.Context, keys []string) error {
	chans, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		c, id, _ := strings.Cut(k, "\x00")
		chans[i], ids[i] = pgChannel(c), id
	}
	_, err := h.DB.ExecContext(ctx, `SELECT pg_notify(c, i) FROM unnest($1::text[], $2::text[]) AS t(c, i)`, chans, ids)
	return err
}

// Subscribe registers a local subscriber fed by Run.
func (h *Postgres) Subscribe(channel string) (<-chan string, func()) {
	return h.hub().Subscribe(channel)
}

// Run listens, and sends the queued hints, until ctx ends.
func (h *Postgres) Run(ctx context.Context) error {
	log := h.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ob := newPendingSet()
	h.outbox.Store(ob)
	defer h.outbox.CompareAndSwap(ob, nil)
	var sending sync.WaitGroup
	sending.Go(func() { h.send(ctx, ob, log) })
	defer sending.Wait()
	chans := map[string]string{}
	for _, c := range []string{ChanMonitor, ChanWorkspace, ChanMonitorUrgent, ChanWorkspaceUrgent, ChanPool} {
		chans[pgChannel(c)] = c
	}
	for ctx.Err() == nil {
		err := h.listen(ctx, chans)
		if ctx.Err() != nil {
			break
		}
		log.Warn("workspace: LISTEN connection lost; polling covers the gap", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

func (h *Postgres) listen(ctx context.Context, chans map[string]string) error {
	conn, err := pgx.Connect(ctx, h.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for pc := range chans {
		if _, err := conn.Exec(ctx, "LISTEN "+pc); err != nil {
			return err
		}
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if c, ok := chans[n.Channel]; ok {
			h.hub().deliver(c, n.Payload)
		}
	}
}

// Redis uses Redis pub/sub: monitor:trigger and workspace:{id}, and the
// urgent channels under their own names. Run must be running for Subscribe
// to receive anything.
type Redis struct {
	Client rueidis.Client
	Logger *slog.Logger
	local  *Local
	once   sync.Once
}

var _ Bus = (*Redis)(nil)

func (h *Redis) hub() *Local {
	h.once.Do(func() { h.local = NewLocal() })
	return h.local
}

// Publish publishes id (on workspace:{id} for ChanWorkspace).
func (h *Redis) Publish(ctx context.Context, channel, id string) error {
	ch, msg := channel, id
	if channel == ChanWorkspace {
		ch, msg = "workspace:"+id, "state_changed"
	}
	return h.Client.Do(ctx, h.Client.B().Publish().Channel(ch).Message(msg).Build()).Error()
}

// Subscribe registers a local subscriber fed by Run.
func (h *Redis) Subscribe(channel string) (<-chan string, func()) {
	return h.hub().Subscribe(channel)
}

// Run subscribes until ctx ends, resubscribing after a lost connection.
func (h *Redis) Run(ctx context.Context) error {
	log := h.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cmd := h.Client.B().Psubscribe().Pattern(ChanMonitor, "workspace:*", ChanMonitorUrgent, ChanWorkspaceUrgent, ChanPool).Build()
	for ctx.Err() == nil {
		err := h.Client.Receive(ctx, cmd, func(m rueidis.PubSubMessage) {
			if id, ok := strings.CutPrefix(m.Channel, "workspace:"); ok {
				h.hub().deliver(ChanWorkspace, id)
			} else {
				h.hub().deliver(m.Channel, m.Message)
			}
		})
		if ctx.Err() != nil {
			break
		}
		log.Warn("workspace: Redis subscription lost; polling covers the gap", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}
