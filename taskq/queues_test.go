package taskq

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// Strict priority: a later queue is served only when every earlier one is
// empty; weighted: both queues are served from the start, in proportion.
// On a cluster the queues sit on different slots.
func TestMultipleQueuesStrictAndWeighted(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	hi, lo := uniq(t, "hi"), uniq(t, "lo")
	enqueueTenant(t, c, lo, "x", 0, 100, Queue(lo))
	enqueueTenant(t, c, hi, "x", 0, 100, Queue(hi))

	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: hi}, {Name: lo}}, Strict: true, Concurrency: 1})
	var mu sync.Mutex
	var order []string
	w.Handle("noop", func(ctx context.Context, tk *Task) error {
		mu.Lock()
		order = append(order, tk.Queue())
		mu.Unlock()
		return nil
	})
	stop := runWorker(t, w)
	waitFor(t, 20*time.Second, "200 done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 200
	})
	stop()
	for i, q := range order {
		if (i < 100) != (q == hi) {
			t.Fatalf("strict: task %d from %s; want all of %s first", i, q, hi)
		}
	}

	enqueueTenant(t, c, lo, "x", 0, 300, Queue(lo))
	enqueueTenant(t, c, hi, "x", 0, 300, Queue(hi))
	w2 := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: hi, Weight: 3}, {Name: lo, Weight: 1}}, Concurrency: 1, BatchSize: 1})
	order = nil
	w2.Handle("noop", w.handler("noop"))
	stop = runWorker(t, w2)
	waitFor(t, 20*time.Second, "200 done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) >= 200
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	nhi := 0
	for _, q := range order[:200] {
		if q == hi {
			nhi++
		}
	}
	// Weighted random order per dequeue: expect 150 of 200 from hi (3:1).
	if nhi < 120 || nhi > 180 {
		t.Errorf("weighted 3:1: %d of the first 200 from %s, want about 150", nhi, hi)
	}
}

// TestClusterIntegration starts the 3-master cluster of
// scripts/services.d/redis_cluster.sh and runs this package's Redis tests
// against it (a child `go test` with GANTRY_TEST_REDIS_CLUSTER set).
func TestClusterIntegration(t *testing.T) {
	if testing.Short() || os.Getenv("GANTRY_TEST_REDIS_CLUSTER") != "" {
		t.Skip("runs the suite against a Redis Cluster in a child go test")
	}
	t.Parallel() // waits on a child go test (main_test.go)
	addrs := "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"
	if !clusterOK(t, addrs) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		svc := exec.CommandContext(ctx, "bash", filepath.Join(testutil.RepoRoot(t), "scripts", "services.sh"), "redis_cluster")
		if out, err := svc.CombinedOutput(); err != nil || !clusterOK(t, addrs) {
			t.Fatalf("scripts/services.sh redis_cluster: %v\n%s", err, out)
		}
	}
	cmd := exec.Command("go", "test", "-count=1", "-short", "-run",
		"Fairness|Retries|BadInput|Timeout|Graceful|Lease|Priority|Results|MultipleQueues|InspectorStates|PauseAndResume|ChainAndChord|DAGOrder|WorkflowFailure|RetryPolicies|Aggregation", ".")
	cmd.Env = append(os.Environ(), "GANTRY_TEST_REDIS_CLUSTER="+addrs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("suite against the cluster failed: %v\n%s", err, out)
	}
	t.Logf("suite against the cluster %s: %s", addrs, strings.TrimSpace(string(out)))
}

// One dequeue is one script call, however many of the worker's queues are
// empty before the one with work (asynq makes one call per queue), with
// limits too (a tenant's rate, in-flight cap and admin weight, the queue's
// cap): here a rate of 1/s with a burst of 2 lets 2 of the 3 tasks go and
// says when the third may. The same call counts each queue's backlog (what
// the weighted order weighs), so that costs no round trip either.
func TestDequeueOneRoundTripOverQueues(t *testing.T) {
	red := testutil.StartRedis(t)
	c := newClient(t, red.Addr())
	r := openRDB(t, red.Addr())
	enqueueTenant(t, c, "q5", "x", 0, 3, Queue("q5"))
	totalCalls(t, r)
	evalsha := func() int64 {
		s, err := r.Client().Do(t.Context(), r.Client().B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(s, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				v, _, _ := strings.Cut(rest, ",")
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	in := newInspector(t, red.Addr())
	if err := in.SetLimit(t.Context(), "q5", "x", Limit{Rate: 1, Burst: 2, MaxActive: 5, Weight: 2}); err != nil {
		t.Fatal(err)
	}
	if err := in.SetLimit(t.Context(), "q5", "", Limit{MaxActive: 10}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r.Dequeue(t.Context(), []string{"warm"}, 1, now, now) // loads the script (EVALSHA → NOSCRIPT → EVAL)
	before := evalsha()
	res, err := r.Dequeue(t.Context(), []string{"q1", "q2", "q3", "q4", "q5"}, 10, now, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if n := evalsha() - before; len(res.Tasks) != 2 || n != 1 {
		t.Errorf("got %d tasks with %d script calls, want 2 (the burst) with 1", len(res.Tasks), n)
	}
	if d := res.Retry.Sub(now); d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Errorf("the next token is due %v after now, want 1 s", d)
	}
	if want := map[string]int64{"q1": 0, "q2": 0, "q3": 0, "q4": 0, "q5": 1}; fmt.Sprint(res.Pending) != fmt.Sprint(want) {
		t.Errorf("backlogs counted by the call %v, want %v", res.Pending, want)
	}
	if lims, err := in.Limits(t.Context(), "q5"); err != nil || len(lims) != 2 || lims[1].Tenant != "x" || lims[1].Weight != 2 {
		t.Errorf("limits of q5: %+v %v, want the tenant's with weight 2", lims, err)
	}
}

// clusterOK reports whether the cluster at addrs answers with all slots served.
func clusterOK(tb testing.TB, addrs string) bool {
	r, err := rdb.Open(addrs)
	if err != nil {
		return false
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Second)
	defer cancel()
	return r.Cluster() && r.Ping(ctx) == nil
}
