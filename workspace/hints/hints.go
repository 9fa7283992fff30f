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

// Local is the in-process hub (SQLite mode). Delivery never blocks:
// a subscriber whose buffer is full misses the hint.
type Local struct {
	// mu protects subs.
	mu   sync.Mutex
	subs map[string]map[chan string]struct{}
}

var _ Bus = (*Local)(nil)

// NewLocal returns an empty hub.
func NewLocal() *Local { return &Local{subs: map[string]map[chan string]struct{}{}} }

// Publish delivers id to every subscriber of channel.
func (h *Local) Publish(_ context.Context, channel, id string) error {
	h.deliver(channel, id)
	return nil
}

func (h *Local) deliver(channel, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs[channel] {
		select {
		case c <- id:
		default:
		}
	}
}

// Subscribe registers a buffered subscriber.
func (h *Local) Subscribe(channel string) (<-chan string, func()) {
	c := make(chan string, 16384)
	h.mu.Lock()
	if h.subs[channel] == nil {
		h.subs[channel] = map[chan string]struct{}{}
	}
	h.subs[channel][c] = struct{}{}
	h.mu.Unlock()
	return c, func() {
		h.mu.Lock()
		delete(h.subs[channel], c)
		h.mu.Unlock()
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
