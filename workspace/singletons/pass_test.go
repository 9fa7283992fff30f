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

// TestPassSkipsRowsObservedOnAHint: a monitor pass leaves out a workspace
// whose observation on a hint began after the pass listed the rows (that
// observation saw a newer row and wrote what it saw), observes the others,
// and forgets the hinted observations it has passed.
func TestPassSkipsRowsObservedOnAHint(t *testing.T) {
	for _, be := range wstest.Backends {
		t.Run(be.Name, func(t *testing.T) {
			ctx := t.Context()
			st := wstest.OpenStore(t, be.DSN(t))
			ids := wstest.CreateMany(t, st, 3, workspace.Running)
			fk := fake.New(0)
			for _, id := range ids {
				if err := fk.Provision(ctx, id); err != nil { // each observes STANDBY now
					t.Fatal(err)
				}
			}
			clk := clock.NewFake(time.Now())
			m := NewHealthMonitor(MonitorConfig{Clock: clk}, st, fk, fk, hints.NewLocal())
			m.hintedAt.Store(ids[0], clk.Now().Add(time.Second))  // observed on a hint after the pass lists
			m.hintedAt.Store(ids[1], clk.Now().Add(-time.Second)) // before it
			if err := m.Pass(ctx); err != nil {
				t.Fatal(err)
			}
			want := []workspace.Status{workspace.Pending, workspace.Standby, workspace.Standby}
			for i, id := range ids {
				w, err := st.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if w.ObservedStatus != want[i] {
					t.Errorf("workspace %d after the pass: observed %s, want %s", i, w.ObservedStatus, want[i])
				}
			}
			if _, ok := m.hintedAt.Load(ids[0]); !ok {
				t.Error("the pass forgot an observation newer than its list")
			}
			if _, ok := m.hintedAt.Load(ids[1]); ok {
				t.Error("the pass kept an observation older than its list")
			}
		})
	}
}
