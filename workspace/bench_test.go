package workspace

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace/provider/fake"
)

// createMany inserts n workspaces wanting desired.
func createMany(tb testing.TB, st *Store, n int, desired Status) []string {
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			w, err := st.Create(context.Background(), NewWorkspace{Name: fmt.Sprint("b", i), Desired: desired}, time.Now())
			if err != nil {
				tb.Error(err)
				return
			}
			ids[i] = w.ID
		}()
	}
	wg.Wait()
	return ids
}

func countConverged(st *Store) int {
	var n int
	st.db.QueryRow(`SELECT COUNT(*) FROM workspaces WHERE observed_status = desired_state AND operation = 'NONE'`).Scan(&n)
	return n
}

// BenchmarkConverge: N workspaces created PENDING wanting RUNNING
// (PROVISIONING then STARTING, two 10 ms fake calls each) until all are
// RUNNING; sched processes vs a plain worker pool of 512 goroutines.
// GANTRY_WS_BENCH_N sets N (default 10,000).
func BenchmarkConverge(b *testing.B) {
	n := envInt("GANTRY_WS_BENCH_N", 10000)
	for _, be := range backends {
		for _, mode := range []string{"sched", "pool"} {
			b.Run(be.name+"/"+mode, func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					st := openStore(b, be.dsn(b))
					createMany(b, st, n, Running)
					cfg := Config{Interval: 5 * time.Second} // hints drive it; ticks are the fallback
					if mode == "pool" {
						cfg.WorkerPool = 512
					}
					b.StartTimer()
					start := time.Now()
					h := startHarness(b, st, fake.New(10*time.Millisecond), NewLocalHints(), cfg)
					for countConverged(st) < n {
						time.Sleep(50 * time.Millisecond)
					}
					el := time.Since(start)
					b.StopTimer()
					h.stop()
					b.ReportMetric(el.Seconds(), "s/converge")
					b.ReportMetric(float64(n)/el.Seconds(), "workspaces/s")
				}
			})
		}
	}
}

// BenchmarkClaimLatency: with N converged workspaces (default 10,000), flip
// one workspace's desired state at a time (as the API does: write + hint)
// and measure until the reconciler's claim is in the row (op_started_at).
func BenchmarkClaimLatency(b *testing.B) {
	n := envInt("GANTRY_WS_BENCH_N", 10000)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			ctx := context.Background()
			st := openStore(b, be.dsn(b))
			ids := createMany(b, st, n, Standby)
			var hints Hints = NewLocalHints()
			if st.Dialect() == Postgres {
				hints = &PGHints{DB: st.db, DSN: st.DSN()}
			}
			h := startHarness(b, st, fake.New(10*time.Millisecond), hints, Config{Interval: 10 * time.Second})
			for countConverged(st) < n {
				time.Sleep(50 * time.Millisecond)
			}
			q0 := h.rec.TickQueries()
			t0 := time.Now()
			h.rec.Tick(ctx)
			tickDur := time.Since(t0)
			if q := h.rec.TickQueries() - q0; q != 1 {
				b.Fatalf("tick over %d converged workspaces issued %d queries", n, q)
			}
			b.ResetTimer()
			var lat []time.Duration
			for i := range b.N {
				id := ids[i%len(ids)]
				w, _ := st.Get(ctx, id)
				next := Running
				if w.DesiredState == Running {
					next = Standby
				}
				t := time.Now()
				st.SetDesired(ctx, id, next, t)
				hints.Publish(ctx, ChanWorkspace, id)
				for {
					w, _ = st.Get(ctx, id)
					if w.Operation != OpNone {
						break
					}
					time.Sleep(200 * time.Microsecond)
				}
				lat = append(lat, w.OpStartedAt.Sub(t.Truncate(time.Millisecond)))
				for w.Operation != OpNone || w.ObservedStatus != next {
					time.Sleep(time.Millisecond)
					w, _ = st.Get(ctx, id)
				}
			}
			b.StopTimer()
			h.stop()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
			b.ReportMetric(float64(tickDur.Microseconds())/1000, "ms/tick-10k-converged")
		})
	}
}

func envInt(name string, def int) int {
	var v int
	if _, err := fmt.Sscan(getenv(name), &v); err == nil && v > 0 {
		return v
	}
	return def
}
