package reconcile

import (
	"testing"

	"github.com/gantryhq/gantry/sched"
	"github.com/gantryhq/gantry/workspace"
)

// stepOnce feeds events to p and returns the step it yields (nil: none).
func stepOnce(t *testing.T, p *wsProc, events ...sched.Event) *reconcileCmd {
	t.Helper()
	var out sched.StepOutput
	if err := p.Step(events, &out); err != nil {
		t.Fatal(err)
	}
	if ys := out.Yields(); len(ys) > 0 {
		c := ys[0].Command.(reconcileCmd)
		return &c
	}
	return nil
}

func msg(data any) sched.Event { return sched.Event{Type: sched.EventMessage, Data: data} }

func done(res stepResult) sched.Event {
	return sched.Event{Type: sched.EventYieldComplete, Data: res}
}

// TestWorkspaceProcessPlansFromTheNewestRow: a process coalesces what
// arrives into one step, and never plans from a snapshot that may be older
// than a change announced to it: a hint (re-read) wins over a snapshot that
// arrives with or after it, and anything that arrives during a step means
// a re-read after it. A user's change (urgentHint) makes the steps urgent
// until one that started after it finds the workspace settled.
func TestWorkspaceProcessPlansFromTheNewestRow(t *testing.T) {
	a, b := &workspace.Workspace{ID: "w", DesiredState: workspace.Running}, &workspace.Workspace{ID: "w", DesiredState: workspace.Standby}
	p := &wsProc{id: "w"}
	if c := stepOnce(t, p, msg(a), msg(b)); c == nil || c.w != b || c.urgent {
		t.Fatalf("two snapshots: step %+v, want one from the newer", c)
	}
	if c := stepOnce(t, p, msg((*workspace.Workspace)(nil)), msg(a)); c != nil {
		t.Fatalf("a second step while one runs: %+v", c)
	}
	if c := stepOnce(t, p, done(stepResult{})); c == nil || c.w != nil {
		t.Fatalf("after messages during a step: %+v, want a re-read", c)
	}
	if c := stepOnce(t, p, done(stepResult{}), msg((*workspace.Workspace)(nil)), msg(a)); c == nil || c.w != nil {
		t.Fatalf("a hint then a snapshot: %+v, want a re-read", c)
	}
	if c := stepOnce(t, p, done(stepResult{}), msg(urgentHint{})); c == nil || c.w != nil || !c.urgent {
		t.Fatalf("a user's change: %+v, want an urgent re-read", c)
	}
	if c := stepOnce(t, p, done(stepResult{again: true, next: a})); c == nil || c.w != a || !c.urgent {
		t.Fatalf("the follow-up of an urgent step: %+v, want urgent, from its row", c)
	}
	if c := stepOnce(t, p, done(stepResult{settled: true})); c != nil {
		t.Fatalf("settled: %+v, want no step", c)
	}
	if c := stepOnce(t, p, msg(b)); c == nil || c.urgent {
		t.Fatalf("after settling: %+v, want a plain step", c)
	}
}
