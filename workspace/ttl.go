package workspace

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/workspace/leader"
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
	// Now is the clock; nil = time.Now.
	Now func() time.Time
	// Hints, if set, receives a ChanWorkspace hint for each change.
	Hints Hints
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
		return fmt.Errorf("%w: TTL interval %v must be positive", ErrBadInput, c.Interval)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// TTLManager is the seed's TTL Manager: it writes only desired_state, and
// only by compare-and-set on the desired state's version, so it never
// overrides a user request that raced it. It runs on the leader (Postgres)
// or in the single process (SQLite); see RunSingletons. On the leader its
// writes go through the leader's lock connection (WithSession), so a
// replica that has lost the lock cannot write.
type TTLManager struct {
	cfg TTLConfig
	st  *Store
	// sess, if set, carries the writes (the leader's lock connection).
	sess *leader.Session

	beforeWrite func(id string) // test hook: runs between a pass's read and its CAS
}

// NewTTLManager validates cfg.
func NewTTLManager(cfg TTLConfig, st *Store) (*TTLManager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &TTLManager{cfg: cfg, st: st}, nil
}

// ttlCandidate is what one pass decides from.
type ttlCandidate struct {
	id       string
	observed Status
	version  int64
	since    time.Time // latest of: entered this status, last activity, created
}

// Pass applies both rules once and returns how many workspaces changed.
func (m *TTLManager) Pass(ctx context.Context) (int, error) {
	now := m.cfg.Now()
	cs, err := m.st.ttlCandidates(ctx)
	if err != nil {
		return 0, err
	}
	changed := 0
	for _, c := range cs {
		var to Status
		switch {
		case c.observed == Running && m.cfg.IdleTimeout > 0 && now.Sub(c.since) >= m.cfg.IdleTimeout:
			to = Standby
		case c.observed == Standby && m.cfg.ArchiveAfter > 0 && now.Sub(c.since) >= m.cfg.ArchiveAfter:
			to = Pending
		default:
			continue
		}
		if m.beforeWrite != nil {
			m.beforeWrite(c.id)
		}
		ok, err := m.setDesired(ctx, c, to, now)
		if err != nil {
			return changed, err
		}
		if !ok {
			m.cfg.Logger.Debug("ttl: lost the race to a user request", "workspace", c.id)
			continue
		}
		changed++
		m.cfg.Logger.Info("ttl: desired state changed", "workspace", c.id, "from", c.observed, "to", to, "idle", now.Sub(c.since).Round(time.Second))
		if m.cfg.Hints != nil {
			m.cfg.Hints.Publish(ctx, ChanWorkspace, c.id)
		}
	}
	return changed, nil
}

// WithSession returns a copy of m whose writes go through the leader's lock
// connection: Session.Exec refuses them (leader.ErrNotLeader) once the lock
// is lost, so a deposed leader's TTL decision never lands.
func (m *TTLManager) WithSession(s *leader.Session) *TTLManager {
	c := *m
	c.sess = s
	return &c
}

func (m *TTLManager) setDesired(ctx context.Context, c ttlCandidate, to Status, now time.Time) (bool, error) {
	if m.sess == nil {
		return m.st.SetDesiredIfVersion(ctx, c.id, c.observed, c.version, to, now)
	}
	n, err := m.sess.Exec(ctx, m.st.rebind(setDesiredIfVersionSQL), string(to), now.UnixMilli(), c.id, string(c.observed), c.version)
	return n == 1, err
}

// Run makes a pass every Interval until ctx ends.
func (m *TTLManager) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := m.Pass(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Warn("ttl: pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ttlCandidates reads the converged, idle-able rows: desired = observed in
// RUNNING or STANDBY with no operation in flight.
func (s *Store) ttlCandidates(ctx context.Context) ([]ttlCandidate, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, observed_status, desired_version, created_at, observed_at, last_activity_at
		FROM workspaces WHERE operation = 'NONE' AND desired_state = observed_status AND observed_status IN ('RUNNING', 'STANDBY')`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ttlCandidate
	for rows.Next() {
		var c ttlCandidate
		var created int64
		var observedAt, activity sql.NullInt64
		if err := rows.Scan(&c.id, &c.observed, &c.version, &created, &observedAt, &activity); err != nil {
			return nil, err
		}
		since := created
		for _, v := range []sql.NullInt64{observedAt, activity} {
			if v.Valid && v.Int64 > since {
				since = v.Int64
			}
		}
		c.since = time.UnixMilli(since)
		out = append(out, c)
	}
	return out, rows.Err()
}

// SetDesiredIfVersion is the TTL manager's only write: desired_state from →
// to, if the row's desired_state is still from and its desired_version is
// still version. It bumps the version. Reports whether it wrote.
func (s *Store) SetDesiredIfVersion(ctx context.Context, id string, from Status, version int64, to Status, now time.Time) (bool, error) {
	n, err := s.exec(ctx, setDesiredIfVersionSQL, string(to), now.UnixMilli(), id, string(from), version)
	return n == 1, err
}

// setDesiredIfVersionSQL is the TTL manager's CAS (arguments: to, now, id,
// from, version), run by the store or through the leader's session.
const setDesiredIfVersionSQL = `UPDATE workspaces SET desired_state = ?, desired_version = desired_version + 1, updated_at = ?
	WHERE id = ? AND desired_state = ? AND desired_version = ? AND operation = 'NONE'`

// Touch records user activity on a workspace (`gantry ws touch ID`, and
// every API call that acts on it): it resets the idle clock and bumps the
// desired version, so a TTL decision taken before it cannot land.
func (s *Store) Touch(ctx context.Context, id string, now time.Time) error {
	n, err := s.exec(ctx, `UPDATE workspaces SET last_activity_at = ?, desired_version = desired_version + 1 WHERE id = ?`, now.UnixMilli(), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: workspace %s", ErrNotFound, id)
	}
	return nil
}

// DesiredVersion reads a workspace's desired_version and last activity.
func (s *Store) DesiredVersion(ctx context.Context, id string) (int64, *time.Time, error) {
	var v int64
	var act sql.NullInt64
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT desired_version, last_activity_at FROM workspaces WHERE id = ?`), id).Scan(&v, &act)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, fmt.Errorf("%w: workspace %s", ErrNotFound, id)
	}
	return v, msPtr(act), err
}
