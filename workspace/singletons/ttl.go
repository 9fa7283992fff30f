package singletons

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/leader"
	"github.com/gantryhq/gantry/workspace/store"
)

// TTL defaults (Codespaces/Gitpod idle 30 min; Daytona archives after 7 days
// stopped; see notes/reconciler.md).
const (
	DefaultIdleTimeout  = 30 * time.Minute
	DefaultArchiveAfter = 7 * 24 * time.Hour
	DefaultTTLInterval  = time.Minute
)

// TTLConfig configures a TTLManager. Zero values are the documented defaults.
type TTLConfig struct {
	// IdleTimeout: a RUNNING workspace with no activity for this long gets
	// desired STANDBY. Zero = DefaultIdleTimeout; negative = never.
	IdleTimeout time.Duration
	// ArchiveAfter: a STANDBY workspace for this long gets desired PENDING
	// (archived). Zero = DefaultArchiveAfter; negative = never.
	ArchiveAfter time.Duration
	// Interval between passes; zero = DefaultTTLInterval.
	Interval time.Duration
	// Clock; nil = the real clock.
	Clock clock.Clock
	// Hints, if set, receives a hints.ChanWorkspace hint for each change.
	Hints hints.Bus
	// Logger; nil = discard.
	Logger *slog.Logger
}

func (c *TTLConfig) validate() error {
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.ArchiveAfter == 0 {
		c.ArchiveAfter = DefaultArchiveAfter
	}
	if c.Interval == 0 {
		c.Interval = DefaultTTLInterval
	}
	if c.Interval < 0 {
		return fmt.Errorf("%w: TTL interval %v must be positive", workspace.ErrBadInput, c.Interval)
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// DesiredWriter is the TTL manager's only write (store.DesiredWriter).
type DesiredWriter = store.DesiredWriter

// TTLStore is what the TTL manager reads and writes; FencedBy routes the
// write through the leader's connection.
type TTLStore interface {
	TTLCandidates(ctx context.Context) ([]store.TTLCandidate, error)
	DesiredWriter
	FencedBy(ex store.Execer) store.DesiredWriter
}

var _ TTLStore = (*store.Store)(nil)

// TTLManager is the seed's TTL Manager: it writes only desired_state, and
// only by compare-and-set on the desired state's version, so it never
// overrides a user request that raced it. It runs on the leader (Postgres)
// or in the single process (SQLite); see RunSingletons. On the leader its
// writes go through the leader's lock connection (WithSession), so a
// replica that has lost the lock cannot write.
type TTLManager struct {
	cfg TTLConfig
	st  TTLStore
	// write is where the CAS goes: the store, or (WithSession) the store
	// fenced by the leader's lock connection.
	write DesiredWriter

	beforeWrite func(id string) // test hook: runs between a pass's read and its CAS
}

// NewTTLManager validates cfg.
func NewTTLManager(cfg TTLConfig, st TTLStore) (*TTLManager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &TTLManager{cfg: cfg, st: st, write: st}, nil
}

// Pass applies both rules once and returns how many workspaces changed.
func (m *TTLManager) Pass(ctx context.Context) (int, error) {
	now := m.cfg.Clock.Now()
	cs, err := m.st.TTLCandidates(ctx)
	if err != nil {
		return 0, err
	}
	changed := 0
	for _, c := range cs {
		var to workspace.Status
		switch {
		case c.Observed == workspace.Running && m.cfg.IdleTimeout > 0 && now.Sub(c.Since) >= m.cfg.IdleTimeout:
			to = workspace.Standby
		case c.Observed == workspace.Standby && m.cfg.ArchiveAfter > 0 && now.Sub(c.Since) >= m.cfg.ArchiveAfter:
			to = workspace.Pending
		default:
			continue
		}
		if m.beforeWrite != nil {
			m.beforeWrite(c.ID)
		}
		ok, err := m.write.SetDesiredIfVersion(ctx, c.ID, c.Observed, c.Version, to, now)
		if err != nil {
			return changed, err
		}
		if !ok {
			m.cfg.Logger.Debug("ttl: lost the race to a user request", "workspace", c.ID)
			continue
		}
		changed++
		m.cfg.Logger.Info("ttl: desired state changed", "workspace", c.ID, "from", c.Observed, "to", to, "idle", now.Sub(c.Since).Round(time.Second))
		if m.cfg.Hints != nil {
			m.cfg.Hints.Publish(ctx, hints.ChanWorkspace, c.ID)
		}
	}
	return changed, nil
}

// WithSession returns a copy of m whose writes go through the leader's lock
// connection: Session.Exec refuses them (leader.ErrNotLeader) once the lock
// is lost, so a deposed leader's TTL decision never lands.
func (m *TTLManager) WithSession(s *leader.Session) *TTLManager {
	c := *m
	c.write = m.st.FencedBy(s)
	return &c
}

// Run makes a pass every Interval until ctx ends.
func (m *TTLManager) Run(ctx context.Context) error {
	t := m.cfg.Clock.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := m.Pass(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Warn("ttl: pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}
