package reconcile

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// TestExitAfterStartReachesTheReconcilerAtOnce: a command that ends after
// its Start returned (the status stays STANDBY, so the monitor writes
// nothing) is recorded at once (here within 5 s, under any load; it takes
// milliseconds), with both intervals at an hour: the monitor passes its
// observation of the executed start on to the reconciler, which asks the
// container how the command ended. Before, it waited for the reconciler's
// next tick (10 s by default; an hour here) — on every store.
func TestExitAfterStartReachesTheReconcilerAtOnce(t *testing.T) {
	t.Parallel() // waits on hints (main_test.go)
	for _, b := range recBackends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			st := b.open(t)
			ctx := t.Context()
			fk := fake.New(0)
			h := startHarness(t, st, fk, hints.NewLocal(), Config{Interval: time.Hour, RetryBackoff: time.Minute})
			w, err := st.Create(ctx, workspace.NewWorkspace{Name: "box", Desired: workspace.Standby}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			h.rec.hints.Publish(ctx, hints.ChanWorkspace, w.ID) // the ticks are an hour apart: hints drive it, as the API's do
			h.waitState(t, w.ID, workspace.Standby, 10*time.Second)
			fk.Crash(w.ID, 1, "exit 3", 3)
			st.SetDesired(ctx, w.ID, workspace.Running, time.Now())
			t0 := time.Now()
			h.rec.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
			var got workspace.Workspace
			wstest.WaitFor(t, 5*time.Second, "the exit in error_info", func() (bool, string) {
				got, _ = st.Get(ctx, w.ID)
				e := got.ErrorInfo
				return e != nil && e.Reason == workspace.ReasonExited && e.ExitStatus == "exit 3" && strings.Contains(e.Output, "boom"), wstest.Describe(got)
			})
			t.Logf("the exit recorded %v after the start was asked for", time.Since(t0).Round(time.Millisecond))
		})
	}
}

// TestDesiredChangeTakesOverFromRetries: a change of desired state that
// makes the failing operation pointless takes over from its retries at
// once (the retry backoff is 30 s here and the retries would go on for
// minutes; the bound is 5 s, for a loaded machine: it takes ~100 ms), on
// every store:
//   - delete of a crash-looping workspace (STARTING retries): gone;
//   - delete of one whose PROVISIONING keeps failing: gone;
//   - delete of one in ERROR with its failed operation kept: gone, without
//     `ws recover`;
//   - desired STANDBY of a crash-looping one: STANDBY, no operation, the
//     error cleared.
func TestDesiredChangeTakesOverFromRetries(t *testing.T) {
	t.Parallel() // waits on failures and a restore timeout (main_test.go)
	for _, b := range recBackends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			st := b.open(t)
			ctx := t.Context()
			fk := fake.New(0)
			reg := prometheus.NewRegistry()
			h := startHarness(t, st, fk, hints.NewLocal(), Config{RetryBackoff: 30 * time.Second, MaxRetries: 10, Metrics: NewMetrics(reg),
				Timeouts: map[workspace.Operation]time.Duration{workspace.OpRestoring: 500 * time.Millisecond}})
			create := func(name string, desired workspace.Status) workspace.Workspace {
				w, err := st.Create(ctx, workspace.NewWorkspace{Name: name, Desired: desired}, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			failing := func(w workspace.Workspace, op workspace.Operation) {
				wstest.WaitFor(t, 10*time.Second, fmt.Sprintf("%s failing in %s", w.Name, op), func() (bool, string) {
					got, _ := st.Get(ctx, w.ID)
					return got.Operation == op && got.ErrorCount >= 1 && got.NextRetryAt != nil, wstest.Describe(got)
				})
			}
			crashLoop := create("crash-loop", workspace.Standby)
			standby := create("crash-loop-standby", workspace.Standby)
			provision := create("provision-fails", workspace.Pending)
			fk.Fail(fake.Provision, provision.ID, 1000)
			st.SetDesired(ctx, provision.ID, workspace.Standby, time.Now())
			h.waitState(t, crashLoop.ID, workspace.Standby, 10*time.Second)
			h.waitState(t, standby.ID, workspace.Standby, 10*time.Second)
			for _, w := range []workspace.Workspace{crashLoop, standby} {
				fk.Crash(w.ID, 1000, "exit 3", 3)
				st.SetDesired(ctx, w.ID, workspace.Running, time.Now())
				failing(w, workspace.OpStarting)
			}
			failing(provision, workspace.OpProvisioning)

			// A workspace in ERROR that kept its operation: a restore that
			// timed out (a hung provider), terminal.
			stuck := create("restore-hangs", workspace.Pending)
			h.waitState(t, stuck.ID, workspace.Pending, 10*time.Second)
			st.SetDesired(ctx, stuck.ID, workspace.Standby, time.Now())
			h.waitState(t, stuck.ID, workspace.Standby, 10*time.Second)
			st.SetDesired(ctx, stuck.ID, workspace.Pending, time.Now())
			h.waitState(t, stuck.ID, workspace.Pending, 10*time.Second)
			fk.Hang(fake.Restore, stuck.ID, true)
			st.SetDesired(ctx, stuck.ID, workspace.Running, time.Now())
			inError := h.waitState(t, stuck.ID, workspace.Error, 10*time.Second)
			if inError.Operation != workspace.OpRestoring || inError.ErrorInfo == nil || inError.ErrorInfo.Reason != workspace.ReasonTimeout {
				t.Fatalf("want ERROR with RESTORING kept after a Timeout: %s", wstest.Describe(inError))
			}

			for _, w := range []workspace.Workspace{crashLoop, provision, stuck} {
				t0 := time.Now()
				if _, err := st.SetDesired(ctx, w.ID, workspace.Deleted, time.Now()); err != nil {
					t.Fatal(err)
				}
				wstest.WaitFor(t, 5*time.Second, w.Name+" deleted", func() (bool, string) {
					got, err := st.Get(ctx, w.ID)
					return err != nil, wstest.Describe(got)
				})
				t.Logf("%s deleted %v after the delete", w.Name, time.Since(t0).Round(time.Millisecond))
			}
			st.SetDesired(ctx, standby.ID, workspace.Standby, time.Now())
			got := h.waitState(t, standby.ID, workspace.Standby, 5*time.Second)
			if got.ErrorInfo != nil || got.ErrorCount != 0 {
				t.Fatalf("crash loop given up for STANDBY: %s; want the error cleared", wstest.Describe(got))
			}
			// The metric follows the row's write: wait for it as for the row.
			wstest.WaitFor(t, 5*time.Second, "gantry_ws_operations_total{type=STARTING,result=superseded} = 2", func() (bool, string) {
				n := wstest.MetricValue(t, reg, "gantry_ws_operations_total", "type", "STARTING", "result", "superseded")
				return n == 2, fmt.Sprint(n)
			})
		})
	}
}

// TestOperationInFlightFinishesBeforeReplan: the seed's rule stands for an
// operation whose call runs: desired STANDBY while the start is being made
// lets the start finish (RUNNING, ok), then stops it; nothing is given up,
// no call overlaps another — on every store.
func TestOperationInFlightFinishesBeforeReplan(t *testing.T) {
	t.Parallel() // waits on 300 ms fake calls (main_test.go)
	for _, b := range recBackends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			st := b.open(t)
			ctx := t.Context()
			fk := fake.New(300 * time.Millisecond)
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg) // the monitor ends what it observes at its target: it counts too
			h := startHarnessMon(t, st, fk, hints.NewLocal(), Config{Interval: 100 * time.Millisecond, Metrics: m}, singletons.MonitorConfig{Interval: 100 * time.Millisecond, Metrics: m})
			w, err := st.Create(ctx, workspace.NewWorkspace{Name: "w", Desired: workspace.Standby}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			h.waitState(t, w.ID, workspace.Standby, 10*time.Second)
			st.SetDesired(ctx, w.ID, workspace.Running, time.Now())
			wstest.WaitFor(t, 10*time.Second, "the start call begun", func() (bool, string) {
				return fk.Calls(w.ID, fake.Start) == 1, fmt.Sprint(fk.Calls(w.ID, fake.Start))
			})
			st.SetDesired(ctx, w.ID, workspace.Standby, time.Now())
			h.waitState(t, w.ID, workspace.Standby, 10*time.Second)
			wstest.WaitFor(t, 10*time.Second, "the start ended ok, then the stop", func() (bool, string) {
				ok := wstest.MetricValue(t, reg, "gantry_ws_operations_total", "type", "STARTING", "result", "ok")
				stopped := wstest.MetricValue(t, reg, "gantry_ws_operations_total", "type", "STOPPING", "result", "ok")
				return ok == 1 && stopped == 1, fmt.Sprintf("STARTING ok %v, STOPPING ok %v", ok, stopped)
			})
			if n := wstest.MetricValue(t, reg, "gantry_ws_operations_total", "type", "STARTING", "result", "superseded"); n != 0 || fk.Calls(w.ID, fake.Start) != 1 || fk.Calls(w.ID, fake.Stop) != 1 {
				t.Fatalf("superseded %v, %d starts, %d stops; want the start finished (not given up), then one stop", n, fk.Calls(w.ID, fake.Start), fk.Calls(w.ID, fake.Stop))
			}
			if d := fk.Duplicates(); len(d) > 0 {
				t.Fatalf("duplicate calls: %v", d)
			}
		})
	}
}
