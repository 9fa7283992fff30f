package singletons

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/leader"
	"github.com/gantryhq/gantry/workspace/store"
)

// LeaderStore is what the election needs of the store: on Postgres its DSN
// (the lock connection) and the lock key; on SQLite no election runs.
type LeaderStore interface {
	Dialect() store.Dialect
	DSN() string
	LeaderLockID(ctx context.Context) (int64, error)
}

var _ LeaderStore = (*store.Store)(nil)

// SingletonsConfig configures RunSingletons. Zero values are the defaults.
type SingletonsConfig struct {
	Store   LeaderStore    // required
	Monitor *HealthMonitor // required
	TTL     *TTLManager    // nil = no TTL manager
	// Retention prunes the audit log and expired sessions; nil = none.
	Retention *Retention
	// ArchiveGC removes surplus and deleted workspaces' archives; nil = none.
	ArchiveGC *ArchiveGC
	// Pools keeps the templates' warm pools full; nil = none.
	Pools *PoolFiller
	// Lease bounds how long the loops can outlive a dead leader (Postgres);
	// zero = 10 s (leader.Config.Lease). A standby takes over within it
	// after the leader's process dies.
	Lease time.Duration
	// LockID is the advisory lock key; zero = one derived from the
	// database and schema, so each workspaces table elects its own leader.
	LockID int64
	// NodeID names this replica in logs and pg_stat_activity.
	NodeID  string
	Metrics Metrics
	Logger  *slog.Logger
}

// RunSingletons runs the loops that must run once per cluster, the
// HealthMonitor (the only writer of observed_status) and the TTL manager,
// until ctx ends.
//
// On SQLite there is one process and no election: both run at once. On
// Postgres they run only while this replica holds the leader lock (a session
// advisory lock on a dedicated connection, package leader): they start when
// the lock is won and are cancelled as soon as it is lost (the lock
// connection fails a ping, or its session ends); RunSingletons waits for
// them to return before campaigning again. The TTL manager's writes go
// through the lock connection, so a deposed leader's write is refused.
func RunSingletons(ctx context.Context, cfg SingletonsConfig) error {
	if cfg.Store == nil || cfg.Monitor == nil {
		return errors.New("workspace: RunSingletons needs a Store and a Monitor")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Metrics = metricsOr(cfg.Metrics)
	if cfg.Store.Dialect() != store.Postgres {
		cfg.Metrics.SetLeader(true)
		defer cfg.Metrics.SetLeader(false)
		runLoops(ctx, cfg, nil)
		return nil
	}
	if cfg.LockID == 0 {
		id, err := cfg.Store.LeaderLockID(ctx)
		if err != nil {
			return err
		}
		cfg.LockID = id
	}
	el, err := leader.New(leader.Config{DSN: cfg.Store.DSN(), LockID: cfg.LockID, Lease: cfg.Lease, NodeID: cfg.NodeID,
		Logger: cfg.Logger, OnChange: func(s leader.State) { cfg.Metrics.SetLeader(s == leader.Leader) }})
	if err != nil {
		return err
	}
	return el.Run(ctx, func(lctx context.Context, s *leader.Session) error {
		runLoops(lctx, cfg, s)
		return nil
	})
}

// runLoops runs the monitor and the TTL manager until ctx ends; sess, if
// set, carries the TTL manager's writes.
func runLoops(ctx context.Context, cfg SingletonsConfig, sess *leader.Session) {
	var wg sync.WaitGroup
	run := func(name string, loop func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg.Metrics.SetSingleton(name, true)
			defer cfg.Metrics.SetSingleton(name, false)
			cfg.Logger.Info("workspace: singleton started", "loop", name, "node", cfg.NodeID)
			loop(ctx)
			cfg.Logger.Info("workspace: singleton stopped", "loop", name, "node", cfg.NodeID)
		}()
	}
	run("monitor", cfg.Monitor.Run)
	if cfg.TTL != nil {
		ttl := cfg.TTL
		if sess != nil {
			ttl = ttl.WithSession(sess)
		}
		run("ttl", ttl.Run)
	}
	if cfg.Retention != nil {
		run("retention", cfg.Retention.Run)
	}
	if cfg.ArchiveGC != nil {
		run("archive-gc", cfg.ArchiveGC.Run)
	}
	if cfg.Pools != nil {
		run("pools", cfg.Pools.Run)
	}
	wg.Wait()
}

// Metrics is what the singletons record (reconcile.Metrics has it): the
// operations an observation ends, and which loops run here. A nil
// *reconcile.Metrics records nothing; a nil Metrics is replaced by one
// that records nothing.
type Metrics interface {
	// OpCompleted counts op, claimed at started, as ended well at now.
	OpCompleted(op workspace.Operation, started *time.Time, now time.Time)
	// SetLeader says whether this replica holds the leader lock.
	SetLeader(on bool)
	// SetSingleton says whether the loop runs here.
	SetSingleton(loop string, on bool)
}

type noMetrics struct{}

func (noMetrics) OpCompleted(workspace.Operation, *time.Time, time.Time) {}
func (noMetrics) SetLeader(bool)                                         {}
func (noMetrics) SetSingleton(string, bool)                              {}

func metricsOr(m Metrics) Metrics {
	if m == nil {
		return noMetrics{}
	}
	return m
}
