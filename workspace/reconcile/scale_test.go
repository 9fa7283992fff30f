package reconcile

import (
	"fmt"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// TestConvergesWithoutTicks: with the reconcile and monitor intervals set
// to an hour, 20,000 new workspaces wanting RUNNING all converge: every
// step after the start-up pass follows a hint or a wake-up, none waits for
// a tick (a hint lost in a burst would leave its workspace stuck for the
// hour), on both databases. Under the race detector (make test) it runs
// 2,000, which take about as long as 20,000 without it (go test ./workspace
// -run TestConvergesWithoutTicks; docs/BENCHMARKS.md quotes a run); the
// hub's own test bursts 100,000 hints. -short runs 2,000, on SQLite.
func TestConvergesWithoutTicks(t *testing.T) {
	n := 20000
	if raceEnabled || testing.Short() {
		n = 2000
	}
	for _, be := range wstest.Backends {
		t.Run(be.Name, func(t *testing.T) {
			wstest.SkipShortBut(t, "sqlite")
			st := wstest.OpenStore(t, be.DSN(t))
			wstest.CreateMany(t, st, n, workspace.Running)
			var hb hints.Bus = hints.NewLocal()
			if st.Dialect() == store.Postgres {
				hb = &hints.Postgres{DB: storetest.DB(t, st.DSN()), DSN: st.DSN()}
			}
			s0 := st.BatchStats()
			start := time.Now()
			h := startHarnessWith(t, st, fake.New(time.Millisecond), hb, Config{Interval: time.Hour}, singletons.MonitorConfig{Interval: time.Hour}, nil)
			defer h.stop()
			wstest.WaitFor(t, 4*time.Minute, fmt.Sprintf("%d workspaces to converge with hour-long intervals", n), func() (bool, string) {
				left, err := st.CountActionable(t.Context())
				if err != nil {
					return false, err.Error()
				}
				return left == 0, fmt.Sprintf("%d still actionable after %s", left, time.Since(start).Round(time.Second))
			})
			if c := countConverged(t, st); c != n {
				t.Fatalf("%d of %d converged", c, n)
			}
			// Two operations, each a claim, "executed", and the observation
			// that ends it (SetObservedComplete): 6 writes, plus the rare
			// compare-and-set that loses to a newer row and is made again.
			writes := float64(st.BatchStats().WriteStmts-s0.WriteStmts) / float64(n)
			if writes < 6 || writes > 6.1 {
				t.Errorf("%.3f writes per workspace, want 6 (at most 6.1)", writes)
			}
			t.Logf("%d workspaces converged in %s, %.3f writes each", n, time.Since(start).Round(time.Millisecond), writes)
		})
	}
}
