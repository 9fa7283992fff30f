package taskq

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// scriptOnly are commands an idle worker issues only inside its scripts
// (reads of its sorted sets, and of the pause fields of its state hash), so
// they do not add round trips.
var scriptOnly = map[string]bool{"zrangebyscore": true, "zrange": true, "zcard": true, "zrangebylex": true, "hget": true, "hexists": true}

// totalCalls sums the calls in INFO commandstats: all of them, and those a
// client sends itself (round trips).
func totalCalls(t *testing.T, r *rdb.RDB) (all, trips int64) {
	t.Helper()
	s, err := r.Client().Do(t.Context(), r.Client().B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		x, _ := strconv.ParseInt(v, 10, 64)
		all += x
		if !scriptOnly[name] {
			trips += x
		}
	}
	return all, trips
}

// An idle worker blocks on its wake-up list instead of polling: it costs
// Redis a few commands per second, and a task enqueued into the idle
// system starts at once (not after a poll interval).
func TestIdleWorkerBlocks(t *testing.T) {
	t.Parallel() // waits on 4 s of an idle worker on a private Redis (main_test.go)
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: "idle"}}, MaintainInterval: time.Second})
	started := make(chan time.Time, 1)
	w.Handle("noop", func(context.Context, *Task) error { started <- time.Now(); return nil })
	runWorker(t, w)
	r := openRDB(t, addr)
	testutil.WaitFor(t, 10*time.Second, "the worker to block on its wake-up list", func() (bool, string) {
		s, err := r.Client().Do(t.Context(), r.Client().B().ClientList().Build()).ToString()
		return err == nil && strings.Contains(s, "cmd=blpop"), s
	})
	totalCalls(t, r) // connect first: the handshake is not the worker's
	all0, trips0 := totalCalls(t, r)
	const idle = 4 * time.Second
	time.Sleep(idle) // real time: what an idle worker costs per second is the thing measured
	all1, trips1 := totalCalls(t, r)
	perSec := float64(trips1-trips0-1) / idle.Seconds() // -1: our INFO
	t.Logf("idle worker: %.1f commands/s sent to Redis (%.1f/s counting the calls inside scripts)",
		perSec, float64(all1-all0-1)/idle.Seconds())
	if perSec > 8 { // measured: about 5 (BLPOP, dequeue, maintain, keep-alive PINGs; record and gauges every 5 s)
		t.Errorf("idle worker sends %.1f commands/s, want a few (it should block, not poll)", perSec)
	}
	t0 := time.Now()
	if _, err := c.Enqueue(t.Context(), NewTask("noop", nil), Queue("idle")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-started:
		// Generous bound: the p99 goal (5 ms) is measured by make bench-queue;
		// a poll-based worker would take up to its poll interval (1 s).
		if d := s.Sub(t0); d > 500*time.Millisecond {
			t.Errorf("task started %s after enqueue into an idle worker", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("task never started")
	}
}
