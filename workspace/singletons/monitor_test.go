package singletons

import (
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// TestObservationEndsAsDecideJudges: an observation ends the operation in
// its own write only where the reconciler would judge it complete
// (workspace.Decide's ObservationEnds): its provider call returned and the
// status observed is its target. Otherwise the observation is written
// alone and the operation stays for the reconciler: a call that may still
// run, a status on the way (STANDBY for a start), a DELETING (which ends
// by removing the row).
func TestObservationEndsAsDecideJudges(t *testing.T) {
	cases := []struct {
		op       workspace.Operation
		executed bool
		want     workspace.Operation // after an observation of STANDBY
	}{
		{workspace.OpProvisioning, false, workspace.OpProvisioning},
		{workspace.OpProvisioning, true, workspace.OpNone},
		{workspace.OpStarting, true, workspace.OpStarting},
		{workspace.OpDeleting, true, workspace.OpDeleting},
	}
	for _, be := range wstest.Backends {
		t.Run(be.Name, func(t *testing.T) {
			ctx := t.Context()
			st := wstest.OpenStore(t, be.DSN(t))
			ids := wstest.CreateMany(t, st, len(cases), workspace.Standby) // observed PENDING
			clk := clock.NewFake(time.Now())
			now := clk.Now()
			fk := fake.New(0)
			for i, id := range ids {
				w, err := st.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				opID := "op-" + id
				if ok, err := st.Claim(ctx, w, cases[i].op, opID, "replica-a", now, now.Add(time.Minute)); err != nil || !ok {
					t.Fatalf("claim %s: %v %v", id, ok, err)
				}
				if cases[i].executed {
					if err := st.Executed(ctx, id, opID, now); err != nil {
						t.Fatal(err)
					}
				}
				if err := fk.Provision(ctx, id); err != nil { // observed STANDBY from now on
					t.Fatal(err)
				}
			}
			m := NewHealthMonitor(MonitorConfig{Clock: clk}, st, fk, fk, hints.NewLocal())
			if err := m.Pass(ctx); err != nil {
				t.Fatal(err)
			}
			for i, id := range ids {
				w, err := st.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if c := cases[i]; w.ObservedStatus != workspace.Standby || w.Operation != c.want {
					t.Errorf("%s (executed %v) observed STANDBY: %s; want operation %s", c.op, c.executed, wstest.Describe(w), c.want)
				}
			}
		})
	}
}
