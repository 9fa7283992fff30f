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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/rueidis"
)

// Hint channels (the seed's names). A hint carries a workspace id.
const (
	ChanMonitor   = "monitor:trigger" // "observe this workspace now"
	ChanWorkspace = "workspace"       // "this workspace's row changed" (Redis: workspace:{id})
)

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
	s := &sub{pending: map[string]struct{}{}, kick: make(chan struct{}, 1), out: make(chan string, 1024), done: make(chan struct{})}
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
	// mu protects pending and order.
	// Invariant: pending holds exactly the ids in order (each once).
	mu      sync.Mutex
	pending map[string]struct{}
	order   []string
	kick    chan struct{} // buffered 1: "order may be non-empty"
	out     chan string
	done    chan struct{} // closed by cancel
}

func (s *sub) add(id string) {
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
func (s *sub) take() []string {
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
type Postgres struct {
	DB     *sql.DB
	DSN    string
	Logger *slog.Logger
	local  *Local
	once   sync.Once
}

var _ Bus = (*Postgres)(nil)

func pgChannel(c string) string { return "gantry_" + strings.NewReplacer(":", "_").Replace(c) }

func (h *Postgres) hub() *Local {
	h.once.Do(func() { h.local = NewLocal() })
	return h.local
}

// Publish sends NOTIFY (delivered at commit, to every replica).
func (h *Postgres) Publish(ctx context.Context, channel, id string) error {
	_, err := h.DB.ExecContext(ctx, `SELECT pg_notify($1, $2)`, pgChannel(channel), id)
	return err
}

// Subscribe registers a local subscriber fed by Run.
func (h *Postgres) Subscribe(channel string) (<-chan string, func()) {
	return h.hub().Subscribe(channel)
}

// Run listens until ctx ends.
func (h *Postgres) Run(ctx context.Context) error {
	log := h.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	chans := map[string]string{pgChannel(ChanMonitor): ChanMonitor, pgChannel(ChanWorkspace): ChanWorkspace}
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

// Redis uses Redis pub/sub: monitor:trigger and workspace:{id}. Run must
// be running for Subscribe to receive anything.
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
	cmd := h.Client.B().Psubscribe().Pattern(ChanMonitor, "workspace:*").Build()
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
