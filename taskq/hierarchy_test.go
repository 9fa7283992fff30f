package taskq

import (
	"context"
	"errors"
	"flag"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// hierBig is the big user's backlog in TestHierarchicalFairShare: 100,000
// keeps the test at a few seconds under -race; -taskq.hier-big=1000000 runs
// the full size (a million tasks).
var hierBig = flag.Int("taskq.hier-big", 100_000, "TestHierarchicalFairShare: tasks of the big user (TestHierarchicalFairShareOverload: at least this many when given)")

// hierOverload is how long TestHierarchicalFairShareOverload keeps its
// workers overloaded: 3 s in the suite; -taskq.hier-overload=60s with
// -taskq.hier-big=1000000 is the full run.
var hierOverload = flag.Duration("taskq.hier-overload", 3*time.Second, "TestHierarchicalFairShareOverload: how long the workers run overloaded")

// enqueueMany enqueues n tasks of tenant into q in batches of 10,000.
func enqueueMany(t *testing.T, c *Client, q, tenant string, n int) {
	t.Helper()
	for n > 0 {
		b := min(n, 10_000)
		enqueueTenant(t, c, q, tenant, 0, b)
		n -= b
	}
}

// echo sends ECHO marker through r (a mark in a MONITOR's stream).
func echo(t *testing.T, r *rdb.RDB, marker string) {
	t.Helper()
	c := r.Client()
	if err := c.Do(t.Context(), c.B().Echo().Message(marker).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// clientCommandsBetween are the names of the commands clients sent (not
// those scripts ran: MONITOR names their source "lua") between the ECHOs
// of the markers from and to in mon's stream, once it shows to.
func clientCommandsBetween(t *testing.T, mon *testutil.Buffer, from, to string) []string {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "MONITOR to show "+to, func() (bool, string) {
		return strings.Contains(mon.String(), `"`+to+`"`), ""
	})
	var out []string
	in := false
	for _, line := range strings.Split(mon.String(), "\n") {
		// 1700000000.123456 [0 127.0.0.1:port] "cmd" "arg"…
		_, cmd, ok := strings.Cut(line, `] "`)
		if !ok || strings.Contains(line, " [0 lua] ") {
			continue
		}
		cmd, _, _ = strings.Cut(cmd, `"`)
		switch {
		case strings.Contains(line, `"ECHO" "`+from+`"`):
			in = true
		case strings.Contains(line, `"ECHO" "`+to+`"`):
			return out
		case in:
			out = append(out, strings.ToLower(cmd))
		}
	}
	return out
}

// TestHierarchicalFairShare is a tenant hierarchy: organisations o1, o2
// and o3 weighted 1:1:2; o1's teams t1 and t2 weighted 1:3; t2 holds a user
// with a huge backlog and a user who arrives later with 100 tasks; o3's
// user sits 4 levels deep. Under overload (every leaf backlogged) a window
// of dequeues must serve each leaf within 5% of its share of the tree
// (o1/t1/u 6.25%, o1/t2/big and o1/t2/small 9.375% each, o2/u 25%,
// o3/x/y/z 50%), Jain's index over served/expected ≥ 0.99, the small
// user's first task within 1 s of its enqueue, and every dequeue one
// Redis call (INFO commandstats of a server of the test's own).
func TestHierarchicalFairShare(t *testing.T) {
	srv := testutil.StartRedis(t)
	addr := srv.Addr()
	c := newClient(t, addr)
	in := newInspector(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	setTreeWeights(t, in, q)
	start := time.Now()
	enqueueMany(t, c, q, "o1/t2/big", *hierBig)
	for _, tn := range []string{"o1/t1/u", "o2/u", "o3/x/y/z"} {
		enqueueMany(t, c, q, tn, 4000)
	}
	t.Logf("enqueued %d + 12,000 tasks in %s", *hierBig, time.Since(start).Round(time.Millisecond))
	r := openRDB(t, addr)
	deq := func(n int) []string {
		now := time.Now()
		res, err := r.Dequeue(ctx, []string{q}, n, now, now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(res.Tasks))
		for i, d := range res.Tasks {
			out[i] = d.Tenant
		}
		return out
	}
	for range 125 { // 2,000 tasks served before the small user arrives
		deq(16)
	}
	enqueued := time.Now()
	enqueueTenant(t, c, q, "o1/t2/small", 0, 100)
	mon := monitor(t, addr)
	echo(t, r, "window-start")
	const calls, per = 64, 16
	count := map[string]float64{}
	var firstSmall time.Duration
	for range calls {
		for _, tn := range deq(per) {
			if tn == "o1/t2/small" && firstSmall == 0 {
				firstSmall = time.Since(enqueued)
			}
			count[tn]++
		}
	}
	echo(t, r, "window-end")
	checkOneCallPerDequeue(t, clientCommandsBetween(t, mon, "window-start", "window-end"), calls)
	checkTreeShares(t, count, calls*per)
	if firstSmall == 0 || firstSmall > time.Second {
		t.Errorf("the small user's first task started %s after its enqueue (0: never); want within 1s", firstSmall)
	}
	t.Logf("small user's first task dequeued %s after its enqueue", firstSmall)
	st := queueStats(t, c, q)
	if n := st.Tree["o1"]; n.Weight != 1 || n.Tenants != 3 || n.Active != st.Tenants["o1/t1/u"].Active+st.Tenants["o1/t2/big"].Active+st.Tenants["o1/t2/small"].Active {
		t.Errorf("stats of node o1: %+v", n)
	}
	if n := st.Tree["o1/t2"]; n.Weight != 3 || n.Tenants != 2 {
		t.Errorf("stats of node o1/t2: %+v", n)
	}
}

// TestHierarchicalFairShareOverload is the tree of
// TestHierarchicalFairShare served by two real workers (concurrency 8
// each, tasks of 1 ms) for -taskq.hier-overload with every leaf
// backlogged beyond what they can serve meanwhile; the small user's 100
// tasks arrive a third of the way in. Over the window each branch gets
// its share within 5% (Jain ≥ 0.99 over served/expected): o1/t1 6.25%,
// o1/t2 (the big and the small user) 18.75%, o2 25%, o3 50%; the small
// user's first task starts within 1 s of its enqueue and all 100 run.
func TestHierarchicalFairShareOverload(t *testing.T) {
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	in := newInspector(t, addr)
	q := uniq(t, "q")
	setTreeWeights(t, in, q)
	// 16 handlers of 1 ms serve at most 16,000 tasks a second: each leaf
	// holds 1.5 times its share of that over the window.
	most := 16_000 * hierOverload.Seconds() * 1.5
	start := time.Now()
	big := int(most * 0.1875) // the big user's share, or -taskq.hier-big if given and more
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "taskq.hier-big" {
			big = max(big, *hierBig)
		}
	})
	backlog := map[string]int{"o1/t1/u": int(most * 0.0625), "o1/t2/big": big, "o2/u": int(most * 0.25), "o3/x/y/z": int(most * 0.5)}
	for tn, n := range backlog {
		enqueueMany(t, c, q, tn, n)
	}
	t.Logf("enqueued %v in %s", backlog, time.Since(start).Round(time.Millisecond))

	var mu sync.Mutex
	count := map[string]float64{}
	var window, smallAt time.Time
	var firstSmall time.Time
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for range 2 {
		w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 8})
		w.Handle("noop", func(_ context.Context, task *Task) error {
			mu.Lock()
			if !window.IsZero() && time.Now().Before(window) {
				count[task.Tenant()]++
				if task.Tenant() == "o1/t2/small" && firstSmall.IsZero() {
					firstSmall = time.Now()
				}
			}
			mu.Unlock()
			time.Sleep(time.Millisecond) // real time: the work that keeps the workers overloaded
			return nil
		})
		stops = append(stops, runWorker(t, w))
	}
	mu.Lock()
	window = time.Now().Add(*hierOverload)
	mu.Unlock()
	time.Sleep(*hierOverload / 3) // real time: the small user arrives a third of the way in
	smallAt = time.Now()
	enqueueTenant(t, c, q, "o1/t2/small", 0, 100)
	time.Sleep(time.Until(window)) // real time: the window is the overload's length
	mu.Lock()
	defer mu.Unlock()
	total := 0.0
	for _, n := range count {
		total += n
	}
	if firstSmall.IsZero() || firstSmall.Sub(smallAt) > time.Second || count["o1/t2/small"] != 100 {
		t.Errorf("the small user: %v of 100 run, the first %s after the enqueue; want all, the first within 1s", count["o1/t2/small"], firstSmall.Sub(smallAt))
	}
	branch := map[string]float64{"o1/t1/u": count["o1/t1/u"], "o1/t2": count["o1/t2/big"] + count["o1/t2/small"], "o2/u": count["o2/u"], "o3/x/y/z": count["o3/x/y/z"]}
	j := checkShares(t, branch, map[string]float64{"o1/t1/u": 0.0625, "o1/t2": 0.1875, "o2/u": 0.25, "o3/x/y/z": 0.5}, total)
	t.Logf("%s of overload: %v tasks served (%.0f/s): %v; small user's first task %s after its enqueue; Jain over served/expected %.4f",
		*hierOverload, total, total/hierOverload.Seconds(), count, firstSmall.Sub(smallAt).Round(time.Millisecond), j)
	for tn, n := range backlog {
		if count[tn] >= float64(n) {
			t.Errorf("%s ran out of tasks (%v served of %d): not overloaded", tn, count[tn], n)
		}
	}
}

// checkOneCallPerDequeue: the commands clients sent while dequeues ran
// dequeue calls are one EVALSHA each (and keep-alive PINGs).
func checkOneCallPerDequeue(t *testing.T, cmds []string, dequeues int) {
	t.Helper()
	n := 0
	var other []string
	for _, c := range cmds {
		switch c {
		case "evalsha":
			n++
		case "ping":
			// rueidis's keep-alive of its idle connections (the test's
			// client's too), no part of a dequeue.
		default:
			other = append(other, c)
		}
	}
	if n != dequeues || len(other) != 0 {
		t.Errorf("%d dequeues sent %d commands, %d of them EVALSHA; want one EVALSHA each (others: %v)", dequeues, len(cmds), n, other)
	}
	t.Logf("%d dequeues sent %d commands to Redis, %d EVALSHA, others %v (MONITOR, scripts' own commands left out)", dequeues, len(cmds), n, other)
}

// checkTreeShares compares the leaves' served counts (of total) with their
// shares of the tree.
func checkTreeShares(t *testing.T, count map[string]float64, total int) {
	t.Helper()
	want := map[string]float64{"o1/t1/u": 0.0625, "o1/t2/big": 0.09375, "o1/t2/small": 0.09375, "o2/u": 0.25, "o3/x/y/z": 0.5}
	j := checkShares(t, count, want, float64(total))
	orgs := map[string]float64{}
	for tn, n := range count {
		orgs[tn[:2]] += n
	}
	t.Logf("served of %d: %v; orgs %v; Jain over served/expected %.4f", total, count, orgs, j)
}

// checkShares checks each served[name] within 5% of want[name] × total and
// Jain's index over served/expected ≥ 0.99, which it returns.
func checkShares(t *testing.T, served, want map[string]float64, total float64) float64 {
	t.Helper()
	var norm []float64
	for name, share := range want {
		exp := share * total
		norm = append(norm, served[name]/exp)
		if d := math.Abs(served[name]-exp) / exp; d > 0.05 {
			t.Errorf("%s: served %v of %v, want %.0f ±5%% (off by %.1f%%)", name, served[name], total, exp, 100*d)
		}
	}
	j := jain(norm)
	if j < 0.99 {
		t.Errorf("Jain index %.4f < 0.99", j)
	}
	return j
}

// setTreeWeights gives q's tree its weights: organisations o1, o2, o3 at
// 1:1:2, o1's teams t1, t2 at 1:3.
func setTreeWeights(t *testing.T, in *Inspector, q string) {
	t.Helper()
	for node, w := range map[string]float64{"o1": 1, "o2": 1, "o3": 2, "o1/t1": 1, "o1/t2": 3} {
		if err := in.SetLimit(t.Context(), q, node, Limit{Weight: w}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTenantPathsChecked: a tenant path has 1 to 4 non-empty segments; an
// enqueue or a limit naming another is refused, nothing stored.
func TestTenantPathsChecked(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	in := newInspector(t, addr)
	q := uniq(t, "q")
	for _, bad := range []string{"a//b", "/a", "a/", "a/b/c/d/e", "/"} {
		if _, err := c.Enqueue(t.Context(), NewTask("noop", nil, Queue(q), Tenant(bad))); !errors.Is(err, ErrInvalidTask) {
			t.Errorf("enqueue with tenant %q: %v, want ErrInvalidTask", bad, err)
		}
		if err := in.SetLimit(t.Context(), q, bad, Limit{Weight: 2}); !errors.Is(err, ErrInvalidTask) {
			t.Errorf("limit of %q: %v, want ErrInvalidTask", bad, err)
		}
	}
	for _, good := range []string{"a", "a/b", "a/b/c/d"} {
		if _, err := c.Enqueue(t.Context(), NewTask("noop", nil, Queue(q), Tenant(good))); err != nil {
			t.Errorf("enqueue with tenant %q: %v", good, err)
		}
	}
	if st := queueStats(t, c, q); st.Pending != 3 || st.Tree["a/b"].Tenants != 1 || st.Tree["a"].Tenants != 2 {
		t.Errorf("pending %d, tree %+v; want 3 tasks, node a over 2 path tenants, a/b over 1", st.Pending, st.Tree)
	}
}

// TestWeightsBounded: a weight outside MinWeight..MaxWeight (or NaN, or
// infinite), at enqueue or in a limit, is refused: a tiny one would
// overflow the tree's tags, an infinite one stop its tenant's clock.
func TestWeightsBounded(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	in := newInspector(t, addr)
	q := uniq(t, "q")
	for _, bad := range []float64{-1, 1e-12, MinWeight / 2, MaxWeight * 2, math.Inf(1), math.NaN()} {
		if _, err := c.Enqueue(t.Context(), NewTask("noop", nil, Queue(q), Tenant("a/b"), Weight(bad))); !errors.Is(err, ErrInvalidTask) {
			t.Errorf("enqueue with weight %g: %v, want ErrInvalidTask", bad, err)
		}
		if err := in.SetLimit(t.Context(), q, "a", Limit{Weight: bad}); err == nil {
			t.Errorf("limit with weight %g accepted", bad)
		}
	}
	for _, good := range []float64{0, MinWeight, 1, MaxWeight} {
		if _, err := c.Enqueue(t.Context(), NewTask("noop", nil, Queue(q), Tenant("a/b"), Weight(good))); err != nil {
			t.Errorf("enqueue with weight %g: %v", good, err)
		}
	}
}
