package taskq

import (
	"context"
	"math"
	"testing"
	"time"
)

// drain dequeues n tasks one at a time (no handlers, straight from the
// script) and returns the tenant of each in service order.
func drainOrder(t *testing.T, addr, q string, n int) []string {
	t.Helper()
	r := openRDB(t, addr)
	ctx := t.Context()
	var out []string
	for len(out) < n {
		now := time.Now()
		deq, err := r.Dequeue(ctx, []string{q}, min(16, n-len(out)), now, now.Add(time.Minute))
		ds := deq.Tasks
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			if _, err := decodeMessage(d.ID, d.Queue, d.Msg); err != nil {
				t.Fatal(err)
			}
			out = append(out, d.Tenant)
		}
	}
	return out
}

func enqueueTenant(t *testing.T, c *Client, q, tenant string, weight float64, n int, opts ...Option) {
	t.Helper()
	tasks := make([]*Task, n)
	for i := range tasks {
		tasks[i] = NewTask("noop", nil, append([]Option{Queue(q), Tenant(tenant), Weight(weight)}, opts...)...)
	}
	if _, err := c.EnqueueBatch(t.Context(), tasks); err != nil {
		t.Fatal(err)
	}
}

func jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	return s * s / (float64(len(xs)) * s2)
}

func TestFairnessEqualWeightsJain(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	// Tenants enqueue very different backlogs, one after the other: the
	// first holds 3000 tasks before the others arrive.
	sizes := map[string]int{"a": 3000, "b": 1000, "c": 1000, "d": 1000, "e": 1000}
	for _, tn := range []string{"a", "b", "c", "d", "e"} {
		enqueueTenant(t, c, q, tn, 0, sizes[tn])
	}
	order := drainOrder(t, addr, q, 2000) // all tenants stay backlogged throughout
	count := map[string]float64{}
	for _, tn := range order {
		count[tn]++
	}
	var shares []float64
	for _, tn := range []string{"a", "b", "c", "d", "e"} {
		shares = append(shares, count[tn])
	}
	j := jain(shares)
	t.Logf("served %v of 2000 under backlog: Jain index %.4f", shares, j)
	if j < 0.99 {
		t.Fatalf("Jain index %.4f < 0.99 (shares %v)", j, shares)
	}
}

func TestFairnessWeights124(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	weights := map[string]float64{"w1": 1, "w2": 2, "w4": 4}
	for _, tn := range []string{"w1", "w2", "w4"} {
		enqueueTenant(t, c, q, tn, weights[tn], 3000)
	}
	order := drainOrder(t, addr, q, 3500) // w4 gets 2000 < 3000: all stay backlogged
	count := map[string]float64{}
	for _, tn := range order {
		count[tn]++
	}
	for _, tn := range []string{"w1", "w2", "w4"} {
		want := 3500 * weights[tn] / 7
		if d := math.Abs(count[tn]-want) / want; d > 0.05 {
			t.Errorf("tenant %s: served %v, want %v ±5%% (off by %.1f%%)", tn, count[tn], want, 100*d)
		}
	}
	t.Logf("served w1=%v w2=%v w4=%v of 3500", count["w1"], count["w2"], count["w4"])
}

func TestFairnessSmallTenantBehindBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("enqueues 100,000 tasks")
	}
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	enqueueTenant(t, c, q, "big", 0, 100_000)
	enqueueTenant(t, c, q, "small", 0, 100)

	w, err := NewWorker(WorkerConfig{Redis: addr, Queues: []QueueSpec{{Name: q}}, Concurrency: 8, DisableSteal: true})
	if err != nil {
		t.Fatal(err)
	}
	var smallDone, bigAtSmallDone int64
	done := make(chan struct{})
	var bigDone int64
	w.Handle("noop", func(ctx context.Context, tk *Task) error { return nil })
	w.cfg.OnSuccess = func(tk *Task) {
		if tk.Tenant() == "small" {
			smallDone++
			if smallDone == 100 {
				bigAtSmallDone = bigDone
				close(done)
			}
		} else {
			bigDone++
		}
	}
	// OnSuccess runs on several goroutines; serialise it.
	var mu = make(chan struct{}, 1)
	inner := w.cfg.OnSuccess
	w.cfg.OnSuccess = func(tk *Task) { mu <- struct{}{}; inner(tk); <-mu }
	start := time.Now()
	stop := runWorker(t, w)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the small tenant's 100 tasks did not finish in 30s")
	}
	el := time.Since(start)
	stop()
	st := queueStats(t, c, q)
	t.Logf("small tenant's 100 tasks done after %s; big tenant had completed %d, %d still pending", el, bigAtSmallDone, st.Tenants["big"].Pending)
	// Fair service interleaves the two tenants one for one, so the small
	// tenant is done after about 100 big tasks, whatever the machine speed.
	if bigAtSmallDone > 400 {
		t.Errorf("big tenant completed %d tasks before the small one's 100 finished; want about 100 (interleaved)", bigAtSmallDone)
	}
	if st.Tenants["big"].Pending < 90_000 {
		t.Errorf("big tenant has %d pending, want most of its 100,000 backlog left", st.Tenants["big"].Pending)
	}
	if el > time.Second {
		t.Logf("note: %s > 1s on this loaded machine (the ordering assertion above is what proves fairness)", el)
	}
}
