package taskq

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// A tenant limited to 20/s completes 200±25 tasks in 10 s, while an
// unlimited tenant on the same workers keeps its speed.
func TestRateLimitedTenantBesideAFreeOne(t *testing.T) {
	if testing.Short() {
		t.Skip("14 s of real time")
	}
	addr := testRedis(t)
	q := uniq(t, "rate")
	c := newClient(t, addr)
	in := newInspector(t, addr)
	ctx := t.Context()
	for range 2 {
		w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 8})
		w.Handle("noop", func(context.Context, *Task) error {
			time.Sleep(2 * time.Millisecond) // real time: a task that takes a little work
			return nil
		})
		runWorker(t, w)
	}
	tenant := func(name string) rdb.TenantStats {
		st, err := c.r.Stats(ctx, q)
		if err != nil {
			t.Error(err)
		}
		return st.Tenants[name]
	}
	// Keep the free tenant's backlog full for the whole test.
	topUp, stopTopUp := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopTopUp()
	wg.Go(func() {
		free := make([]*Task, 2000)
		for i := range free {
			free[i] = NewTask("noop", nil, Queue(q), Tenant("free"))
		}
		for topUp.Err() == nil {
			if st, err := c.r.Stats(topUp, q); err == nil && st.Tenants["free"].Pending < 3000 {
				c.EnqueueBatch(topUp, free)
			}
			time.Sleep(50 * time.Millisecond) // real time: the backlog is topped up at a steady pace through the throughput windows
		}
	})
	completed := func(name string) int64 { return tenant(name).Completed }
	measure := func(d time.Duration) float64 {
		n0, t0 := completed("free"), time.Now()
		time.Sleep(d) // real time: a throughput window
		return float64(completed("free")-n0) / time.Since(t0).Seconds()
	}
	waitFor(t, 5*time.Second, "the free tenant running", func() bool { return completed("free") > 0 })
	alone := measure(3 * time.Second)

	if err := in.SetLimit(ctx, q, "slow", Limit{Rate: 20}); err != nil {
		t.Fatal(err)
	}
	enqueueTenant(t, c, q, "slow", 0, 1000)
	slow0 := completed("slow")
	beside := measure(10 * time.Second)
	slow := completed("slow") - slow0
	t.Logf("free tenant alone %.0f tasks/s, beside the limited one %.0f tasks/s; limited tenant: %d tasks in 10 s at 20/s", alone, beside, slow)
	if slow < 175 || slow > 225 {
		t.Errorf("the tenant limited to 20/s completed %d tasks in 10 s, want 200±25", slow)
	}
	// Blocked by the limited tenant, the free one would run at about its
	// 20/s; the bound leaves room for a loaded machine (CI runs packages
	// side by side on 2 cores).
	if beside < 0.3*alone {
		t.Errorf("the free tenant slowed from %.0f to %.0f tasks/s beside a limited one", alone, beside)
	}
	st := queueStats(t, c, q).Tenants["slow"]
	if st.Limit == nil || st.Limit.Rate != 20 || st.Limit.Burst != 1 {
		t.Errorf("stats of the limited tenant: %+v", st.Limit)
	}
	// Cleared: the rest runs at once.
	if ok, err := in.ClearLimit(ctx, q, "slow"); err != nil || !ok {
		t.Fatalf("clear: %v %v", ok, err)
	}
	waitFor(t, 10*time.Second, "the rest of the limited tenant once cleared", func() bool { return completed("slow") == 1000 })
}

// --max-active 3 never sees a fourth running task of the tenant across two
// worker processes, while another tenant runs 16 at once.
func TestMaxActiveAcrossTwoWorkerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("worker processes")
	}
	t.Parallel() // waits on 100 ms sleeps in two worker processes (main_test.go)
	bin := testutil.GantryBinary(t)
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	in := newInspector(t, addr)
	ctx := t.Context()
	if err := in.SetLimit(ctx, "cap", "capped", Limit{MaxActive: 3}); err != nil {
		t.Fatal(err)
	}
	var tasks []*Task
	for range 60 {
		tasks = append(tasks, NewTask("sleep", json.RawMessage(`{"ms":100}`), Queue("cap"), Tenant("capped")),
			NewTask("sleep", json.RawMessage(`{"ms":100}`), Queue("cap"), Tenant("other")))
	}
	if _, err := c.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		startWorkerProc(t, bin, "--redis", addr, "--queues", "cap", "--concurrency", "8", "--no-cron")
	}
	var maxCapped, maxOther, samples atomic.Int64
	testutil.WaitFor(t, 30*time.Second, "both tenants' 60 tasks completed", func() (bool, string) {
		p, err := in.List(ctx, "cap", StateActive, ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int64{}
		for _, d := range p.Tasks {
			n[d.Tenant]++
		}
		samples.Add(1)
		if n["capped"] > maxCapped.Load() {
			maxCapped.Store(n["capped"])
		}
		if n["other"] > maxOther.Load() {
			maxOther.Store(n["other"])
		}
		st := queueStats(t, c, "cap")
		return st.Tenants["capped"].Completed == 60 && st.Tenants["other"].Completed == 60, fmt.Sprintf("%+v", st.Tenants)
	})
	t.Logf("%d samples: at most %d running of the capped tenant, %d of the other", samples.Load(), maxCapped.Load(), maxOther.Load())
	if maxCapped.Load() != 3 {
		t.Errorf("the tenant capped at 3 had at most %d running at once, want 3 exactly", maxCapped.Load())
	}
	if maxOther.Load() <= 3 {
		t.Errorf("the other tenant never ran more than %d at once: the cap held it back", maxOther.Load())
	}
}

// A weight set by an admin overrides the weight enqueues carry; bad limits
// are refused.
func TestLimitWeightOverridesAndBadLimits(t *testing.T) {
	addr := testRedis(t)
	q := uniq(t, "weight")
	c := newClient(t, addr)
	in := newInspector(t, addr)
	r := openRDB(t, addr)
	ctx := t.Context()
	enqueueTenant(t, c, q, "a", 5, 300)
	enqueueTenant(t, c, q, "b", 1, 300)
	if err := in.SetLimit(ctx, q, "a", Limit{Weight: 1}); err != nil {
		t.Fatal(err)
	}
	if err := in.SetLimit(ctx, q, "b", Limit{Weight: 3}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	deq, err := r.Dequeue(ctx, []string{q}, 200, now, now.Add(time.Minute))
	ds := deq.Tasks
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, d := range ds {
		n[d.Tenant]++
	}
	if n["b"] < 145 || n["b"] > 155 {
		t.Errorf("weights overridden to a=1 b=3: 200 dequeues gave %v, want b≈150", n)
	}
	if st := queueStats(t, c, q); st.Tenants["b"].Weight != 3 {
		t.Errorf("stats show b's weight %v, want the override 3", st.Tenants["b"].Weight)
	}
	for _, bad := range []struct {
		tenant string
		l      Limit
	}{{"a", Limit{}}, {"", Limit{Weight: 2}}, {"a", Limit{Rate: -1}}, {"a", Limit{Burst: 5}}, {"a", Limit{MaxActive: -2}}} {
		if err := in.SetLimit(ctx, q, bad.tenant, bad.l); err == nil {
			t.Errorf("limit %+v for %q accepted", bad.l, bad.tenant)
		}
	}
	for in, want := range map[string]float64{"20/s": 20, "300/m": 5, "3600/h": 1, "2.5": 2.5} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0/s", "-1/s", "x/s", "5/d", "NaN", "nan/s", "10/", "Inf/s"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}
