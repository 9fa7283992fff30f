package taskq

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// testRedis returns the shared test Redis (internal/testutil.Redis: started
// by scripts/services.sh when down), or the cluster named by
// GANTRY_TEST_REDIS_CLUSTER (comma-separated nodes) when that is set.
func testRedis(t testing.TB) string {
	t.Helper()
	if c := os.Getenv("GANTRY_TEST_REDIS_CLUSTER"); c != "" {
		waitRedis(t, strings.Split(c, ",")[0], 5*time.Second)
		return c
	}
	return testutil.Redis(t)
}

func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func waitRedis(t testing.TB, addr string, d time.Duration) {
	t.Helper()
	testutil.WaitFor(t, d, "redis at "+addr+" to answer", func() (bool, string) {
		return reachable(addr), "unreachable"
	})
}

// uniq returns a queue name unique to this test run, so tests sharing a
// Redis never see each other's queues.
// The queue's keys are deleted when the test ends.
func uniq(t testing.TB, name string) string {
	q := fmt.Sprintf("t%d-%s-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"), name)
	addr := testRedis(t)
	t.Cleanup(func() {
		r, err := rdb.Open(addr)
		if err != nil {
			return
		}
		defer r.Close()
		ctx := context.WithoutCancel(t.Context()) // t.Context() ends before cleanups run
		c := r.Client()
		for _, k := range rdb.QueueKeys(q) {
			c.Do(ctx, c.B().Del().Key(k).Build())
		}
		c.Do(ctx, c.B().Srem().Key(rdb.QueuesKey).Member(q).Build())
	})
	return q
}

// privateRedis is a redis-server owned by one test, on a free loopback port.
type privateRedis struct {
	t    testing.TB
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
}

func startPrivateRedis(t testing.TB, extra ...string) *privateRedis {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := &privateRedis{t: t, dir: t.TempDir(), port: port}
	p.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", p.dir, "--save", ""}, extra...)
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *privateRedis) addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

func (p *privateRedis) start() {
	p.t.Helper()
	p.cmd = exec.Command("redis-server", p.args...)
	p.cmd.Stdout, _ = os.Create(filepath.Join(p.dir, "redis.log"))
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start redis-server: %v", err)
	}
	waitRedis(p.t, p.addr(), 10*time.Second)
}

// stop shuts the server down (SHUTDOWN, so an AOF is flushed as configured).
func (p *privateRedis) stop() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}

func openRDB(t testing.TB, addr string) *rdb.RDB {
	t.Helper()
	r, err := rdb.Open(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func newClient(t testing.TB, addr string) *Client {
	t.Helper()
	c, err := NewClient(ClientConfig{Redis: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// runWorker starts w.Run in the background; the returned stop cancels it
// and waits for Run to return.
func runWorker(t testing.TB, w *Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("Run did not return within 60s of cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitFor is testutil.WaitFor for conditions with nothing to report.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, d, what, func() (bool, string) { return cond(), "" })
}

func queueStats(t testing.TB, c *Client, q string) QueueStats {
	t.Helper()
	st, err := c.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st.Queues[q]
}
