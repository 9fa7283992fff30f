package singletons

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/leader"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/fs"
	"github.com/gantryhq/gantry/workspace/provider/process"
	"github.com/gantryhq/gantry/workspace/reconcile"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// On SQLite there is one process and no election: the monitor and the TTL
// manager run at once, and stop when the context ends.
func TestSingletonsOnSQLiteNeedNoElection(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	id := wstest.SeedConverged(t, st, "idle", workspace.Running)
	// The monitor sees what the row says: a running container over its volume.
	storage := &archive.Storage{Root: t.TempDir(), Blobs: &fs.BlobStore{Dir: t.TempDir()}}
	if err := storage.Provision(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	running := provider.ContainerFuncs{ObserveFunc: func(context.Context, string) (provider.ContainerState, error) { return provider.Running, nil }}
	mon := NewHealthMonitor(MonitorConfig{Interval: time.Hour}, st, running, storage, nil)
	ttl, err := NewTTLManager(TTLConfig{Clock: clock.NewFake(wstest.T0.Add(time.Hour)), Interval: time.Hour}, st)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := reconcile.NewMetrics(reg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- RunSingletons(ctx, SingletonsConfig{Store: st, Monitor: mon, TTL: ttl, Metrics: m}) }()
	wstest.WaitFor(t, 5*time.Second, "the TTL manager's first pass", func() (bool, string) {
		w, _ := st.Get(t.Context(), id)
		return w.DesiredState == workspace.Standby, wstest.Describe(w)
	})
	for _, g := range [][]string{{"gantry_ws_leader"}, {"gantry_ws_singleton_running", "loop", "monitor"}, {"gantry_ws_singleton_running", "loop", "ttl"}} {
		if v := wstest.MetricValue(t, reg, g[0], g[1:]...); v != 1 {
			t.Errorf("%v = %v while running; want 1", g, v)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunSingletons did not return after cancel")
	}
	if v := wstest.MetricValue(t, reg, "gantry_ws_singleton_running", "loop", "monitor"); v != 0 {
		t.Errorf("monitor gauge %v after stop", v)
	}
}

// A deposed leader's TTL write is refused: it goes through the lock
// connection, which checks that it still holds the lock. Two ways to lose
// it: the server ends the session (as after tcp_user_timeout), or the lock
// is released while the connection lives.
func TestDeposedLeaderTTLWriteRefused(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	st := wstest.OpenStore(t, dsn)
	db := storetest.DB(t, dsn) // the test's own connections, to terminate the leader's
	lockID, err := st.LeaderLockID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"session terminated", "lock released"} {
		t.Run(how, func(t *testing.T) {
			id := wstest.SeedConverged(t, st, "idle-"+strings.ReplaceAll(how, " ", "-"), workspace.Running)
			ttl, err := NewTTLManager(TTLConfig{Clock: clock.NewFake(wstest.T0.Add(time.Hour))}, st)
			if err != nil {
				t.Fatal(err)
			}
			el, err := leader.New(leader.Config{DSN: dsn, LockID: lockID, Lease: time.Second, NodeID: "deposed"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			sessc := make(chan *leader.Session, 1)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				first := true
				el.Run(ctx, func(lctx context.Context, s *leader.Session) error {
					if first {
						first = false
						sessc <- s
					}
					<-lctx.Done()
					return nil
				})
			}()
			t.Cleanup(func() { cancel(); wg.Wait() })
			var sess *leader.Session
			select {
			case sess = <-sessc:
			case <-time.After(10 * time.Second):
				t.Fatal("never elected")
			}
			// Depose it.
			switch how {
			case "session terminated":
				var pid int
				if err := sess.Do(ctx, func(ctx context.Context, c *pgx.Conn) error {
					return c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
				}); err != nil {
					t.Fatal(err)
				}
				if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
					t.Fatal(err)
				}
				wstest.WaitFor(t, 10*time.Second, "the terminated backend to exit", func() (bool, string) {
					var n int
					db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n)
					return n == 0, fmt.Sprint(n)
				})
			case "lock released":
				if err := sess.Do(ctx, func(ctx context.Context, c *pgx.Conn) error {
					_, err := c.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lockID)
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			n, err := ttl.WithSession(sess).Pass(ctx)
			if !errors.Is(err, leader.ErrNotLeader) || n != 0 {
				t.Fatalf("deposed leader's TTL pass = %d, %v; want 0, ErrNotLeader", n, err)
			}
			if w, _ := st.Get(ctx, id); w.DesiredState != workspace.Running {
				t.Fatalf("a deposed leader's TTL write landed: %s", wstest.Describe(w))
			}
			// The same decision through the pool does land: the fence, not
			// the rule, refused it.
			if n, err := ttl.Pass(ctx); n != 1 || err != nil {
				t.Fatalf("TTL pass through the pool = %d, %v; want 1 write", n, err)
			}
		})
	}
}

// scrape reads a /metrics page into "name{labels}" → value text.
func scrape(t *testing.T, url string) map[string]string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			out[line[:i]] = line[i+1:]
		}
	}
	return out
}

// leads reports whether a replica's /metrics say it runs both singletons.
func leads(m map[string]string) bool {
	return m["gantry_ws_leader"] == "1" && m[`gantry_ws_singleton_running{loop="monitor"}`] == "1" &&
		m[`gantry_ws_singleton_running{loop="ttl"}`] == "1"
}

// idle reports whether a replica's /metrics say it runs no singleton.
func idle(m map[string]string) bool {
	return m != nil && m["gantry_ws_leader"] == "0" && m[`gantry_ws_singleton_running{loop="monitor"}`] != "1" &&
		m[`gantry_ws_singleton_running{loop="ttl"}`] != "1"
}

// Two `gantry ws serve` replicas on one Postgres.
// Only the leader runs the monitor and the TTL manager; SIGKILL it and the
// other takes both over within 2 × the lease, and they work there: a
// workspace is observed RUNNING (only the monitor writes that) and, idle,
// the TTL manager sends it to STANDBY.
func TestSingletonsFailoverAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	dsn := storetest.PostgresDSN(t)
	data := t.TempDir()
	const lease = time.Second
	extra := []string{"--leader-lease", lease.String(), "--idle-timeout", "3s", "--ttl-interval", "200ms"}
	a := wstest.StartServe(t, dsn, data, extra...)
	wstest.WaitFor(t, 20*time.Second, "replica A to lead", func() (bool, string) {
		m := scrape(t, a.URL)
		return leads(m), m["gantry_ws_leader"]
	})
	b := wstest.StartServe(t, dsn, data, extra...)
	wstest.WaitFor(t, 20*time.Second, "replica B up as a standby", func() (bool, string) {
		m := scrape(t, b.URL)
		return idle(m), m["gantry_ws_leader"]
	})
	time.Sleep(2 * lease) // real time: B keeps polling the lock and must keep losing
	if m := scrape(t, b.URL); !idle(m) || !leads(scrape(t, a.URL)) {
		t.Fatalf("two leaders or none: A %v, B %v", leads(scrape(t, a.URL)), m)
	}

	killed := time.Now()
	a.Stop(syscall.SIGKILL)
	wstest.WaitFor(t, 10*time.Second, "replica B to take over", func() (bool, string) {
		m := scrape(t, b.URL)
		return leads(m), m["gantry_ws_leader"]
	})
	took := time.Since(killed)
	t.Logf("handover after SIGKILL: %v (lease %v)", took, lease)
	if took > 2*lease {
		t.Fatalf("handover took %v; want ≤ 2 × lease = %v", took, 2*lease)
	}

	// B's monitor and TTL manager do their jobs.
	id := strings.TrimSpace(b.CLI("create", "after-failover", "--desired", "RUNNING"))
	t.Cleanup(func() {
		(&process.Container{RunDir: filepath.Join(data, "run")}).Stop(context.WithoutCancel(t.Context()), id)
	})
	wstest.WaitFor(t, 20*time.Second, "observed RUNNING (B's monitor)", func() (bool, string) {
		w := b.Get(id)
		return w.ObservedStatus == workspace.Running, wstest.Describe(w)
	})
	wstest.WaitFor(t, 20*time.Second, "desired STANDBY after 3s idle (B's TTL manager), then STANDBY", func() (bool, string) {
		w := b.Get(id)
		return w.DesiredState == workspace.Standby && w.ObservedStatus == workspace.Standby && w.Operation == workspace.OpNone, wstest.Describe(w)
	})
}

// A leader that loses its lock connection stops its monitor and TTL manager
// within the lease, and they stay stopped while another holds the lock.
func TestSingletonsStopWhenLeadershipLost(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	st := wstest.OpenStore(t, dsn)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	lockID, err := st.LeaderLockID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fkMon := NewHealthMonitor(MonitorConfig{Interval: time.Hour}, st, provider.ContainerFuncs{
		ObserveFunc: func(context.Context, string) (provider.ContainerState, error) { return provider.Missing, nil }},
		&archive.Storage{Root: t.TempDir(), Blobs: &fs.BlobStore{Dir: t.TempDir()}}, nil)
	ttl, err := NewTTLManager(TTLConfig{Interval: time.Hour}, st)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	const lease = 400 * time.Millisecond
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		RunSingletons(ctx, SingletonsConfig{Store: st, Monitor: fkMon, TTL: ttl, Lease: lease, NodeID: "stopper", Metrics: reconcile.NewMetrics(reg)})
	}()
	defer wg.Wait()
	defer cancel()
	running := func() bool {
		return wstest.MetricValue(t, reg, "gantry_ws_singleton_running", "loop", "monitor") == 1 &&
			wstest.MetricValue(t, reg, "gantry_ws_singleton_running", "loop", "ttl") == 1
	}
	stopped := func() bool {
		return wstest.MetricValue(t, reg, "gantry_ws_singleton_running", "loop", "monitor") == 0 &&
			wstest.MetricValue(t, reg, "gantry_ws_singleton_running", "loop", "ttl") == 0 &&
			wstest.MetricValue(t, reg, "gantry_ws_leader") == 0
	}
	wstest.WaitFor(t, 10*time.Second, "elected", func() (bool, string) { return running(), "" })

	// Another session waits to take the lock; the leader's session is
	// ended by the server. Retry if the old leader wins the lock back.
	rival, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Close(t.Context())
	for attempt := 0; ; attempt++ {
		if attempt == 5 {
			t.Fatal("the deposed leader won the lock back 5 times in a row")
		}
		if _, err := rival.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'gantry-leader-stopper'`); err != nil {
			t.Fatal(err)
		}
		var got bool
		deadline := time.Now().Add(2 * time.Second)
		for !got && time.Now().Before(deadline) {
			if err := rival.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lockID).Scan(&got); err != nil {
				t.Fatal(err)
			}
		}
		if got {
			break
		}
		wstest.WaitFor(t, 10*time.Second, "re-elected", func() (bool, string) { return running(), "" })
	}
	lost := time.Now()
	wstest.WaitFor(t, 2*lease, "the loops to stop", func() (bool, string) { return stopped(), "" })
	t.Logf("singletons stopped ≤ %v after the rival took the lock (lease %v)", time.Since(lost), lease)
	time.Sleep(3 * lease) // real time: the old leader keeps campaigning and keeps losing
	if !stopped() {
		t.Fatal("the singletons ran again while another session held the lock")
	}
	rival.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lockID)
	wstest.WaitFor(t, 10*time.Second, "re-elected after the rival let go", func() (bool, string) { return running(), "" })
}
