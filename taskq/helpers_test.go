package taskq

import (
	"context"
	"fmt"
	"net"
	"os"
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

// taskRecords is how many fields queue q's task hash holds (each task's
// record and its side fields): 0 once every task is gone.
func taskRecords(t testing.TB, addr, q string) (int64, error) {
	r := openRDB(t, addr)
	return r.Client().Do(t.Context(), r.Client().B().Hlen().Key("tq:{"+q+"}:tasks").Build()).AsInt64()
}
