package reconcile

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// TestReplicasNeverDuplicate: 3 replicas (each its own pool, LISTEN
// connection, reconciler and monitor) on one Postgres, one fake world,
// 1,000 workspaces with random desired changes; one replica is killed
// (its context cancelled mid-operation) halfway. Zero duplicate provider
// calls; everything ends converged or in ERROR with a reason.
//
// Duration: GANTRY_WS_REPLICA_SECONDS (default 10 s; the acceptance run is 60).
func TestReplicasNeverDuplicate(t *testing.T) {
	if testing.Short() {
		t.Skip("long-running")
	}
	secs := 10
	if v, err := strconv.Atoi(os.Getenv("GANTRY_WS_REPLICA_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	ctx := t.Context()
	dsn := storetest.PostgresDSN(t)
	fk := fake.New(2 * time.Millisecond)
	var hs []*harness
	for i := range 3 {
		st := wstest.OpenStore(t, dsn)
		hs = append(hs, startHarness(t, st, fk, &hints.Postgres{DB: storetest.DB(t, dsn), DSN: dsn},
			Config{Owner: fmt.Sprint("replica-", i), Interval: 500 * time.Millisecond, Lease: 3 * time.Second, MaxRetries: 3, RetryBackoff: 50 * time.Millisecond}))
	}
	st := hs[0].st
	states := []workspace.Status{workspace.Pending, workspace.Standby, workspace.Running}
	var ids []string
	for i := range 1000 {
		w, err := st.Create(ctx, workspace.NewWorkspace{Name: fmt.Sprint("r", i), Desired: states[i%3]}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, w.ID)
		if i%50 == 0 {
			fk.Fail(fake.Start, w.ID, 2) // retried and converges
		}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	end := time.Now().Add(time.Duration(secs) * time.Second)
	killAt := time.Now().Add(time.Duration(secs) * time.Second / 2)
	changes := 0
	for time.Now().Before(end) {
		if !killAt.IsZero() && time.Now().After(killAt) {
			hs[2].stop()
			killAt = time.Time{}
		}
		for range 20 {
			st.SetDesired(ctx, ids[rng.IntN(len(ids))], states[rng.IntN(3)], time.Now())
			changes++
		}
		time.Sleep(20 * time.Millisecond) // real time: changes arrive in bursts while replicas reconcile
	}
	wstest.WaitFor(t, 90*time.Second, "every workspace converged or in ERROR", func() (bool, string) {
		all, _ := st.List(ctx)
		bad := 0
		last := ""
		for _, w := range all {
			if w.ObservedStatus == workspace.Error {
				if w.ErrorInfo == nil || w.ErrorInfo.Reason == "" {
					return false, "ERROR without reason"
				}
				continue
			}
			if w.ObservedStatus != w.DesiredState || w.Operation != workspace.OpNone {
				bad++
				last = wstest.Describe(w)
			}
		}
		return bad == 0, fmt.Sprintf("%d not converged, e.g. %s", bad, last)
	})
	for _, h := range hs {
		h.stop()
	}
	dups := fk.Duplicates()
	t.Logf("%d s, %d desired changes, %d provider calls, %d duplicates", secs, changes, fk.TotalCalls(), len(dups))
	if len(dups) > 0 {
		t.Fatalf("duplicates: %v", dups[:min(10, len(dups))])
	}
}
