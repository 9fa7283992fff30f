package leader

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/gantryhq/gantry/internal/testutil"
)

func TestMain(m *testing.M) {
	if os.Getenv("GANTRY_LEADER_HELPER") != "" {
		helperMain()
		return
	}
	goleak.VerifyTestMain(m)
}

// testDSN is the Postgres the tests use (GANTRY_TEST_POSTGRES, default the
// project's loopback DSN); the test fails if it does not answer.
func testDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("GANTRY_TEST_POSTGRES")
	if dsn == "" {
		dsn = "postgres://gantry:gantry@127.0.0.1:5432/gantry?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("postgres needed (scripts/services.sh postgres): %v", err)
	}
	c.Close(ctx)
	return dsn
}

func randLock() int64 {
	var b [8]byte
	rand.Read(b[:])
	return int64(binary.LittleEndian.Uint64(b[:]) >> 2)
}

// helperMain is a replica: it campaigns and, while leader, writes its name
// through the lock connection every 50ms, printing "LEADER" once elected.
func helperMain() {
	lease, _ := time.ParseDuration(os.Getenv("LEASE"))
	lock, _ := strconv.ParseInt(os.Getenv("LOCK"), 10, 64)
	e, err := New(Config{DSN: os.Getenv("DSN"), LockID: lock, Lease: lease, NodeID: os.Getenv("NODE")})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	e.Run(context.Background(), func(ctx context.Context, s *Session) error {
		fmt.Println("LEADER", os.Getenv("NODE"))
		for ctx.Err() == nil {
			err := s.Do(ctx, func(ctx context.Context, c *pgx.Conn) error {
				_, err := c.Exec(ctx, `INSERT INTO leader_test (lock, node, at) VALUES ($1, $2, now())`, lock, os.Getenv("NODE"))
				return err
			})
			if err != nil && ctx.Err() == nil {
				fmt.Println("WRITE-ERR", err)
			}
			time.Sleep(50 * time.Millisecond) // real time: the child writes at a steady pace until it is killed
		}
		return nil
	})
}

type replica struct {
	cmd   *exec.Cmd
	lines chan string
}

func startReplica(t *testing.T, dsn string, lock int64, lease time.Duration, node string) *replica {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GANTRY_LEADER_HELPER=1", "DSN="+dsn, "LOCK="+strconv.FormatInt(lock, 10), "LEASE="+lease.String(), "NODE="+node)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{cmd: cmd, lines: make(chan string, 100)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return r
}

func (r *replica) waitLeader(timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				return false
			}
			if strings.HasPrefix(l, "LEADER") {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// Two replicas: exactly one leads; SIGKILL it and the other leads within
// 2 × lease, and the writes through the lock connection switch to it.
func TestFailoverAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	dsn := testDSN(t)
	ctx := t.Context()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(t.Context())
	if _, err := c.Exec(ctx, `CREATE TABLE IF NOT EXISTS leader_test (lock BIGINT, node TEXT, at TIMESTAMPTZ)`); err != nil {
		t.Fatal(err)
	}
	lock := randLock()
	t.Cleanup(func() { c.Exec(context.WithoutCancel(t.Context()), `DELETE FROM leader_test WHERE lock = $1`, lock) })
	const lease = 2 * time.Second

	a := startReplica(t, dsn, lock, lease, "a")
	if !a.waitLeader(30 * time.Second) {
		t.Fatal("replica a never became leader")
	}
	b := startReplica(t, dsn, lock, lease, "b")
	if b.waitLeader(2 * lease) {
		t.Fatal("replica b became leader while a holds the lock")
	}
	killed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !b.waitLeader(2 * lease) {
		t.Fatalf("replica b did not take over within 2 × lease (%v) after SIGKILL of the leader", 2*lease)
	}
	took := time.Since(killed)
	t.Logf("handover took %v (lease %v)", took, lease)
	// b's writes go through its lock connection and land after the kill.
	testutil.WaitFor(t, 10*time.Second, "the new leader to write through its session", func() (bool, string) {
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM leader_test WHERE lock = $1 AND node = 'b'`, lock).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0, "no row of node b"
	})
	var lastA, firstB time.Time
	c.QueryRow(ctx, `SELECT max(at) FROM leader_test WHERE lock = $1 AND node = 'a'`, lock).Scan(&lastA)
	c.QueryRow(ctx, `SELECT min(at) FROM leader_test WHERE lock = $1 AND node = 'b'`, lock).Scan(&firstB)
	if !firstB.After(lastA) {
		t.Fatalf("leaders overlapped: a wrote until %v, b from %v", lastA, firstB)
	}
}

// In-process: leadership is exclusive, is lost when the lock connection is
// killed server-side, and the lead context carries ErrLostLeadership.
func TestStepDownOnLostConnection(t *testing.T) {
	dsn := testDSN(t)
	lock := randLock()
	e, err := New(Config{DSN: dsn, LockID: lock, Lease: 400 * time.Millisecond, NodeID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pids := make(chan uint32, 4)
	causes := make(chan error, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx, func(lctx context.Context, s *Session) error {
			s.Do(lctx, func(_ context.Context, c *pgx.Conn) error { pids <- c.PgConn().PID(); return nil })
			<-lctx.Done()
			causes <- context.Cause(lctx)
			return nil
		})
	}()
	var pid uint32
	select {
	case pid = <-pids:
	case <-time.After(20 * time.Second):
		t.Fatal("never elected")
	}
	if e.State() != Leader {
		t.Fatalf("State = %v while leading", e.State())
	}
	// A second elector on the same lock stays standby: its term keeps
	// polling the busy lock until its context ends.
	e2, _ := New(Config{DSN: dsn, LockID: lock, Lease: 400 * time.Millisecond, NodeID: "y"})
	tctx, tcancel := context.WithTimeout(t.Context(), time.Second)
	won, err := e2.term(tctx, func(context.Context, *Session) error { return nil })
	tcancel()
	if err != nil || won {
		t.Fatalf("second elector term = %v, %v; want lock busy", won, err)
	}
	admin, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(t.Context())
	if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, int32(pid)); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !strings.Contains(fmt.Sprint(cause), ErrLostLeadership.Error()) {
			t.Fatalf("lead ctx cause = %v; want ErrLostLeadership", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("leader did not step down after its connection was killed")
	}
	// It campaigns again and wins on a new connection.
	select {
	case p2 := <-pids:
		if p2 == pid {
			t.Fatal("re-elected on the dead connection")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("not re-elected")
	}
	cancel()
	<-done
	if e.State() != Standby {
		t.Fatalf("State after Run = %v", e.State())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, cfg := range []Config{{}, {DSN: "x", Lease: time.Millisecond}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
