package workspace

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Hint channels (the seed's names). A hint carries a workspace id and only
// speeds things up: every component also polls, so a dropped hint costs
// latency, never correctness.
const (
	ChanMonitor   = "monitor:trigger" // "observe this workspace now"
	ChanWorkspace = "workspace"       // "this workspace's row changed" (Redis: workspace:{id})
)

// Hints publishes and delivers hints.
type Hints interface {
	Publish(ctx context.Context, channel, id string) error
	// Subscribe returns a channel of ids published on channel (from any
	// replica, for the remote implementations) and a cancel func.
	Subscribe(channel string) (<-chan string, func())
}

// LocalHints is the in-process hub (SQLite mode). Delivery never blocks:
// a subscriber whose buffer is full misses the hint.
type LocalHints struct {
	// mu protects subs.
	mu   sync.Mutex
	subs map[string]map[chan string]struct{}
}

var _ Hints = (*LocalHints)(nil)

// NewLocalHints returns an empty hub.
func NewLocalHints() *LocalHints { return &LocalHints{subs: map[string]map[chan string]struct{}{}} }

// Publish delivers id to every subscriber of channel.
func (h *LocalHints) Publish(_ context.Context, channel, id string) error {
	h.deliver(channel, id)
	return nil
}

func (h *LocalHints) deliver(channel, id string) {
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
func (h *LocalHints) Subscribe(channel string) (<-chan string, func()) {
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

// DropHints drops every hint (tests: the poll alone must converge).
type DropHints struct{}

func (DropHints) Publish(context.Context, string, string) error { return nil }
func (DropHints) Subscribe(string) (<-chan string, func()) {
	return make(chan string), func() {}
}

// PGHints uses Postgres NOTIFY (sent with the pool) and LISTEN (on one
// dedicated connection, reconnected after errors). Run must be running for
// Subscribe to receive anything.
type PGHints struct {
	DB     *sql.DB
	DSN    string
	Logger *slog.Logger
	local  *LocalHints
	once   sync.Once
}

var _ Hints = (*PGHints)(nil)

func pgChannel(c string) string { return "gantry_" + strings.NewReplacer(":", "_").Replace(c) }

func (h *PGHints) hub() *LocalHints {
	h.once.Do(func() { h.local = NewLocalHints() })
	return h.local
}

// Publish sends NOTIFY (delivered at commit, to every replica).
func (h *PGHints) Publish(ctx context.Context, channel, id string) error {
	_, err := h.DB.ExecContext(ctx, `SELECT pg_notify($1, $2)`, pgChannel(channel), id)
	return err
}

// Subscribe registers a local subscriber fed by Run.
func (h *PGHints) Subscribe(channel string) (<-chan string, func()) {
	return h.hub().Subscribe(channel)
}

// Run listens until ctx ends.
func (h *PGHints) Run(ctx context.Context) error {
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

func (h *PGHints) listen(ctx context.Context, chans map[string]string) error {
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

// RedisHints uses Redis pub/sub: monitor:trigger and workspace:{id}.
type RedisHints struct {
	Client *redis.Client
	Logger *slog.Logger
	local  *LocalHints
	once   sync.Once
}

var _ Hints = (*RedisHints)(nil)

func (h *RedisHints) hub() *LocalHints {
	h.once.Do(func() { h.local = NewLocalHints() })
	return h.local
}

// Publish publishes id (on workspace:{id} for ChanWorkspace).
func (h *RedisHints) Publish(ctx context.Context, channel, id string) error {
	if channel == ChanWorkspace {
		return h.Client.Publish(ctx, "workspace:"+id, "state_changed").Err()
	}
	return h.Client.Publish(ctx, channel, id).Err()
}

// Subscribe registers a local subscriber fed by Run.
func (h *RedisHints) Subscribe(channel string) (<-chan string, func()) {
	return h.hub().Subscribe(channel)
}

// Run subscribes until ctx ends.
func (h *RedisHints) Run(ctx context.Context) error {
	ps := h.Client.PSubscribe(ctx, ChanMonitor, "workspace:*")
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			if id, ok := strings.CutPrefix(m.Channel, "workspace:"); ok {
				h.hub().deliver(ChanWorkspace, id)
			} else {
				h.hub().deliver(m.Channel, m.Payload)
			}
		}
	}
}
