package reconcile

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/urgency"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// analyzed brings the planner's statistics up to date after a bulk
// create, as a database that has held its rows for a minute (autovacuum's
// naptime) has them: otherwise Postgres plans the run's statements from
// the statistics of an empty table until autovacuum analyzes it, at some
// moment in the middle of a 100,000-workspace run.
func analyzed(tb testing.TB, st *store.Store) {
	if st.Dialect() != store.Postgres {
		return
	}
	if _, err := storetest.Exec(tb, st.DSN(), "ANALYZE workspaces"); err != nil {
		tb.Fatal(err)
	}
}

func countConverged(tb testing.TB, st *store.Store) int {
	n, err := st.CountConverged(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// waitConverged polls until all n workspaces are converged, cheaply:
// whether any row is still actionable is one index probe on SQLite, and
// on Postgres a scan that stops at the first actionable row (the whole
// table only in the last polls). (Counting what is left scanned it all:
// 51 ms on Postgres with 100,000 rows left, and at four polls a second a
// sixth of the database server's time went to the benchmark instead of
// the run it measures.)
func waitConverged(b *testing.B, st *store.Store, n int, limit time.Duration) {
	testutil.WaitFor(b, limit, fmt.Sprintf("all %d workspaces to converge", n), func() (bool, string) {
		busy, err := st.AnyActionable(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if !busy {
			return true, ""
		}
		left, _ := st.CountActionable(b.Context())
		return false, fmt.Sprintf("%d of %d workspaces still actionable", left, n)
	})
	if c := countConverged(b, st); c != n {
		b.Fatalf("only %d of %d workspaces converged (the rest in ERROR?)", c, n)
	}
}

// BenchmarkConverge: N workspaces created PENDING wanting RUNNING
// (PROVISIONING then STARTING, two 10 ms fake calls each) until all are
// RUNNING; sched processes vs a plain worker pool of 512 goroutines.
// GANTRY_WS_BENCH_N sets N (default 10,000). Besides the time it reports
// the database work per workspace: statements written and read, and how
// many statements one write batch (one round trip / transaction) carried.
func BenchmarkConverge(b *testing.B) {
	n := envInt("GANTRY_WS_BENCH_N", 10000)
	for _, be := range wstest.Backends {
		for _, mode := range []string{"sched", "pool"} {
			b.Run(be.Name+"/"+mode, func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					st := wstest.OpenStore(b, be.DSN(b))
					wstest.CreateMany(b, st, n, workspace.Running)
					analyzed(b, st)
					// The seed's default intervals (reconciler 10 s, monitor
					// 30 s): hints drive it, the periodic passes are the fallback.
					cfg := Config{Interval: 10 * time.Second}
					var setup func(*Reconciler)
					if mode == "pool" {
						setup = func(r *Reconciler) { usePool(r, 512) }
					}
					s0 := st.BatchStats()
					u0 := startUsage()
					stopProfile := startBenchProfile(b)
					b.StartTimer()
					start := time.Now()
					h := startHarnessWith(b, st, fake.New(10*time.Millisecond), hints.NewLocal(), cfg, singletons.MonitorConfig{Interval: 30 * time.Second}, setup)
					waitConverged(b, st, n, 5*time.Minute)
					el := time.Since(start)
					b.StopTimer()
					stopProfile()
					s1 := st.BatchStats()
					h.stop()
					u0.report(b, el)
					b.ReportMetric(el.Seconds(), "s/converge")
					b.ReportMetric(float64(n)/el.Seconds(), "workspaces/s")
					b.ReportMetric(float64(s1.WriteStmts-s0.WriteStmts)/float64(n), "writes/ws")
					b.ReportMetric(float64(s1.ReadRows-s0.ReadRows)/float64(n), "reads/ws")
					b.ReportMetric(float64(s1.WriteStmts-s0.WriteStmts)/float64(max(1, s1.WriteBatches-s0.WriteBatches)), "writes/batch")
					b.ReportMetric(float64(s1.ReadRows-s0.ReadRows)/float64(max(1, s1.ReadBatches-s0.ReadBatches)), "reads/batch")
				}
			})
		}
	}
}

// BenchmarkClaimLatency: with N converged workspaces (default 10,000), flip
// one workspace's desired state at a time (as the API does: an urgent write
// and an urgent hint), wait until that change has fully converged, and take
// the claim time from the row (op_started_at, written by the claim; ms resolution). Waiting for
// convergence rather than for "operation in flight" never misses a short
// operation, and a sample that does not converge in 30 s fails the run
// instead of spinning. One sample per b.Loop iteration:
// -benchtime 200x gives 200 samples. It also asserts that one Tick over the
// N converged workspaces issues one query, and times it.
func BenchmarkClaimLatency(b *testing.B) {
	n := envInt("GANTRY_WS_BENCH_N", 10000)
	for _, be := range wstest.Backends {
		b.Run(be.Name, func(b *testing.B) {
			ctx := b.Context()
			st, gate := openGated(b, be.DSN(b))
			ids := wstest.CreateMany(b, st, n, workspace.Standby)
			var hb hints.Bus = hints.NewLocal()
			if st.Dialect() == store.Postgres {
				hb = &hints.Postgres{DB: storetest.DB(b, st.DSN()), DSN: st.DSN()}
			}
			counted := &countingStore{Store: st}
			h := startHarnessWith(b, counted, fake.New(10*time.Millisecond), hb, Config{Interval: 10 * time.Second, Gate: gate}, singletons.MonitorConfig{Interval: 30 * time.Second}, nil)
			waitConverged(b, st, n, 5*time.Minute)
			q0 := counted.listed.Load()
			t0 := time.Now()
			if err := h.rec.Tick(ctx); err != nil {
				b.Fatal(err)
			}
			tickDur := time.Since(t0)
			if q := counted.listed.Load() - q0; q != 1 {
				b.Fatalf("tick over %d converged workspaces issued %d queries", n, q)
			}
			var claimed, called []time.Duration
			i := 0
			for b.Loop() {
				c, k := claimSample(b, st, h.fake, hb, ids[i%len(ids)])
				claimed, called = append(claimed, c), append(called, k)
				i++
			}
			h.stop()
			b.ReportMetric(float64(len(claimed)), "samples")
			b.ReportMetric(ms(rank(claimed, 50)), "ms-p50")
			b.ReportMetric(ms(rank(claimed, 99)), "ms-p99")
			b.ReportMetric(ms(rank(claimed, 100)), "ms-max")
			b.ReportMetric(ms(rank(called, 50)), "ms-call-p50")
			b.ReportMetric(ms(rank(called, 99)), "ms-call-p99")
			b.ReportMetric(ms(tickDur), "ms/tick-converged")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// rank is the nearest-rank p-th percentile of ds (sorted in place).
func rank(ds []time.Duration, p int) time.Duration {
	slices.Sort(ds)
	return ds[max(0, (len(ds)*p+99)/100-1)]
}

// claimSample flips id's desired state, waits for the change to converge
// and returns how long after the change the claim was stamped
// (op_started_at, ms resolution) and how long until the provider call
// began (an upper bound of the claim's commit: the call follows it).
func claimSample(b *testing.B, st *store.Store, fk *fake.Provider, hb hints.Bus, id string) (claimed, called time.Duration) {
	ctx := b.Context()
	w, err := st.Get(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	prevOp, next := w.OpID, workspace.Running
	if w.DesiredState == workspace.Running {
		next = workspace.Standby
	}
	t := time.Now()
	if _, err := st.SetDesired(urgency.Mark(ctx), id, next, t); err != nil {
		b.Fatal(err)
	}
	hb.Publish(ctx, hints.ChanWorkspaceUrgent, id)
	// The claim is timed from the row, not from this wait.
	testutil.WaitFor(b, 30*time.Second, fmt.Sprintf("%s → %s to converge", id, next), func() (bool, string) {
		w, err = st.Get(ctx, id)
		return err == nil && w.OpID != prevOp && w.Operation == workspace.OpNone && w.ObservedStatus == next, fmt.Sprintf("%s (err %v)", wstest.Describe(w), err)
	})
	return w.OpStartedAt.Sub(t.Truncate(time.Millisecond)), fk.LastCall(id).Sub(t)
}

// startBenchProfile writes a CPU profile of the timed part alone (not
// the setup's inserts) to $GANTRY_WS_BENCH_CPUPROFILE, if set; the
// returned stop ends it.
func startBenchProfile(b *testing.B) (stop func()) {
	path := os.Getenv("GANTRY_WS_BENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

func envInt(name string, def int) int {
	var v int
	if _, err := fmt.Sscan(os.Getenv(name), &v); err == nil && v > 0 {
		return v
	}
	return def
}

// countingStore counts the tick's queries: one per tick over converged
// workspaces (ListActionableIDs finds none).
type countingStore struct {
	*store.Store
	listed atomic.Int64
}

func (c *countingStore) ListActionable(ctx context.Context) ([]workspace.Workspace, error) {
	c.listed.Add(1)
	return c.Store.ListActionable(ctx)
}

func (c *countingStore) ListActionableIDs(ctx context.Context) ([]string, error) {
	c.listed.Add(1)
	return c.Store.ListActionableIDs(ctx)
}
