// Package leader elects one replica among several that share a Postgres
// database to run the cluster's singleton loops (the HealthMonitor and the
// TTL manager), as the seed's Coordinator does.
//
// Election is a session advisory lock, pg_try_advisory_lock(LockID), taken on
// a dedicated connection that lives as long as the leadership. The leader's
// writes go through that same connection (Session.Do): if the connection
// dies, the lock and the ability to write die together, so there is never a
// "zombie" leader whose lock outlived its writes (code-hub ADR-012).
//
// Lifecycle of one Elector:
//
//	standby ──try lock ok──▶ leader ──ping fails / lead returns / ctx ends──▶ standby
//	   ▲  └─try lock busy: wait RetryInterval ─┘                                  │
//	   └──────────────────────── close the connection (releases the lock) ◀───────┘
//
// Handover bound: a leader that is SIGKILLed has its socket closed by the
// kernel, Postgres ends the session and frees the lock, and a standby polls
// every Lease/4 on a connection it keeps open (no connect or authentication
// on the handover path), so it takes over within about Lease/4 plus one
// query, well inside Lease even on a loaded machine. A leader cut off without a
// close (a partition) is dropped by the server after tcp_user_timeout = Lease
// and steps down itself when a ping takes longer than Lease; the standby
// then wins within its next poll: worst case about 1.5 × Lease.
//
// On SQLite there is one process and no election: callers run the loops
// directly (see singletons.RunSingletons).
//
// Tour:
//
//	leader.go   Config, Elector.Run, Session, states
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultLockID is the advisory lock key when Config.LockID is zero
// ("gantry" in ASCII).
const DefaultLockID int64 = 0x67616e747279

// State is an Elector's role.
type State int32

const (
	Standby State = iota // not holding the lock
	Leader               // holding the lock; lead is running
)

func (s State) String() string {
	switch s {
	case Standby:
		return "standby"
	case Leader:
		return "leader"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// ErrLostLeadership is the cause of the lead context's cancellation when
// the lock connection fails.
var ErrLostLeadership = errors.New("leader: lost the lock connection")

// ErrNotLeader is returned by Session.Exec when the session no longer holds
// the lock (its connection died, or the lock was released): the write was
// refused, not applied.
var ErrNotLeader = errors.New("leader: this replica no longer holds the leader lock")

// Config configures an Elector. Zero values are the documented defaults.
type Config struct {
	// DSN of the Postgres database. Required.
	DSN string
	// LockID is the advisory lock key; zero = DefaultLockID.
	LockID int64
	// Lease bounds how long leadership can outlive a dead leader; zero = 10s.
	// Standbys poll every Lease/4; the leader pings every Lease/4.
	Lease time.Duration
	// NodeID names this replica in logs and application_name; zero = "gantry".
	NodeID string
	// Logger; nil = discard.
	Logger *slog.Logger
	// OnChange, if set, is called with each state change (for metrics).
	OnChange func(State)
}

func (c *Config) validate() error {
	if c.DSN == "" {
		return errors.New("leader: Config.DSN is empty")
	}
	if c.LockID == 0 {
		c.LockID = DefaultLockID
	}
	if c.Lease == 0 {
		c.Lease = 10 * time.Second
	}
	if c.Lease < 200*time.Millisecond {
		return fmt.Errorf("leader: Config.Lease %v: want at least 200ms", c.Lease)
	}
	if c.NodeID == "" {
		c.NodeID = "gantry"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Elector campaigns for leadership. Safe for concurrent use.
type Elector struct {
	cfg   Config
	state atomic.Int32 // State; written by Run only
}

// New validates cfg.
func New(cfg Config) (*Elector, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Elector{cfg: cfg}, nil
}

// State reports the current role.
func (e *Elector) State() State { return State(e.state.Load()) }

func (e *Elector) set(s State) {
	if State(e.state.Swap(int32(s))) != s && e.cfg.OnChange != nil {
		e.cfg.OnChange(s)
	}
}

// Session is the leader's lock connection. Do serialises its use: the
// elector's pings and the loops' writes share it, because the connection
// must be the one holding the lock. Once the term ends the session is
// closed: Do and Exec return ErrNotLeader.
type Session struct {
	lockID int64
	mu     sync.Mutex // mu protects conn
	conn   *pgx.Conn  // nil once the term ended
}

// Do runs fn with the lock connection.
func (s *Session) Do(ctx context.Context, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return ErrNotLeader
	}
	return fn(ctx, s.conn)
}

// close ends the session: the connection closes (releasing the lock if it
// still held it) under mu, so no Do or Exec uses it at the same time.
func (s *Session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close(context.Background())
		s.conn = nil
	}
}

// Exec runs one statement through the lock connection, but only while that
// connection still holds the lock; otherwise it returns ErrNotLeader and
// runs nothing. Checking first and then executing is safe because a session
// advisory lock can only be released by its own session (which mu
// serialises) or by that session's death (which fails the statement too):
// a write either happens under the lock or not at all.
func (s *Session) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return 0, ErrNotLeader
	}
	held, err := holds(ctx, s.conn, s.lockID)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNotLeader, err)
	}
	if !held {
		return 0, ErrNotLeader
	}
	tag, err := s.conn.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// holds reports whether conn's session holds advisory lock id.
func holds(ctx context.Context, conn *pgx.Conn, id int64) (bool, error) {
	var held bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
		AND granted AND ((classid::bigint << 32) | objid::bigint) = $1)`, id).Scan(&held)
	return held, err
}

// Run campaigns until ctx ends. Whenever this replica wins, it calls
// lead(leadCtx, session); leadCtx is cancelled when leadership is lost
// (cause ErrLostLeadership) or ctx ends, and Run waits for lead to return
// before closing the connection. A lead that returns early gives up
// leadership; Run then campaigns again. Run returns nil when ctx ends.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context, s *Session) error) error {
	defer e.set(Standby)
	poll := e.cfg.Lease / 4 // after a failed connection; term polls the lock itself
	for ctx.Err() == nil {
		won, err := e.term(ctx, lead)
		if err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn("leader: campaign", "node", e.cfg.NodeID, "err", err)
		}
		if won {
			continue // campaign again at once after a lost term
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return nil
}

// term is one attempt: connect, wait for the lock on that connection, and
// once it is ours lead until the connection or ctx fails.
func (e *Elector) term(ctx context.Context, lead func(context.Context, *Session) error) (won bool, err error) {
	cc, err := pgx.ParseConfig(e.cfg.DSN)
	if err != nil {
		return false, fmt.Errorf("leader: DSN: %w", err)
	}
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = "gantry-leader-" + e.cfg.NodeID
	// The server drops a silent leader's session (and lock) after Lease.
	cc.RuntimeParams["tcp_user_timeout"] = strconv.FormatInt(e.cfg.Lease.Milliseconds(), 10)
	cc.ConnectTimeout = e.cfg.Lease
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, fmt.Errorf("leader: connect: %w", err)
	}
	defer conn.Close(context.Background())
	if ok, err := e.waitLock(ctx, conn); !ok {
		return false, err
	}
	e.cfg.Logger.Info("leader: elected", "node", e.cfg.NodeID, "lock", e.cfg.LockID)
	e.set(Leader)
	defer e.set(Standby)

	s := &Session{lockID: e.cfg.LockID, conn: conn}
	defer s.close() // before the deferred conn.Close, and under the session's lock
	leadCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- lead(leadCtx, s) }()

	t := time.NewTicker(e.cfg.Lease / 4)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			e.cfg.Logger.Info("leader: stepped down", "node", e.cfg.NodeID, "err", err)
			return true, err
		case <-ctx.Done():
			cancel(ctx.Err())
			<-done
			return true, nil
		case <-t.C:
			if err := e.ping(ctx, s); err != nil {
				e.cfg.Logger.Warn("leader: lost the lock connection", "node", e.cfg.NodeID, "err", err)
				cancel(fmt.Errorf("%w: %v", ErrLostLeadership, err))
				<-done
				return true, err
			}
		}
	}
}

// waitLock tries the lock on conn every Lease/4 until it is ours (true),
// the connection fails (the error) or ctx ends (false, nil). Keeping one
// connection makes a standby's takeover one query, not a new session.
func (e *Elector) waitLock(ctx context.Context, conn *pgx.Conn) (bool, error) {
	t := time.NewTicker(e.cfg.Lease / 4)
	defer t.Stop()
	for {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, e.cfg.LockID).Scan(&ok); err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			return false, fmt.Errorf("leader: try lock: %w", err)
		}
		if ok {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-t.C:
		}
	}
}

// ping checks, through the session, that the connection still holds the
// lock; it fails if that takes longer than Lease.
func (e *Elector) ping(ctx context.Context, s *Session) error {
	pctx, cancel := context.WithTimeout(ctx, e.cfg.Lease)
	defer cancel()
	return s.Do(pctx, func(ctx context.Context, conn *pgx.Conn) error {
		held, err := holds(ctx, conn, e.cfg.LockID)
		if err != nil {
			return err
		}
		if !held {
			return errors.New("advisory lock no longer held")
		}
		return nil
	})
}
