package handoff_test

import (
	"testing"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/handoff"
)

// TestMailbox: a handed row is taken once, a later Hand replaces it, Drop
// removes it, and each box is apart.
func TestMailbox(t *testing.T) {
	m := handoff.New()
	w := workspace.Workspace{ID: "w1"}
	a, c := w, w
	a.Name, c.Name = "a", "c"
	m.Hand(handoff.ToMonitor, a)
	m.Hand(handoff.ToMonitor, c)
	m.Hand(handoff.ToReconciler, a)
	if got, ok := m.Take(handoff.ToMonitor, w.ID); !ok || got.Name != "c" {
		t.Fatalf("Take = %q, %v; want the last row handed", got.Name, ok)
	}
	if _, ok := m.Take(handoff.ToMonitor, w.ID); ok {
		t.Fatal("a handed row was taken twice")
	}
	if got, ok := m.Take(handoff.ToReconciler, w.ID); !ok || got.Name != "a" {
		t.Fatalf("Take(ToReconciler) = %q, %v; want the row handed to that box", got.Name, ok)
	}
	m.Hand(handoff.ToReconciler, a)
	m.Drop(handoff.ToReconciler, w.ID)
	if _, ok := m.Take(handoff.ToReconciler, w.ID); ok {
		t.Fatal("a dropped row was taken")
	}
	m.Drop(handoff.ToMonitor, "never handed") // nothing to drop: no-op
}
