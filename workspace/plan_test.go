package workspace

import (
	"testing"

	"pgregory.net/rapid"
)

func TestPlanTable(t *testing.T) {
	tests := []struct {
		observed, desired Status
		archive           bool
		want              Operation
	}{
		{Pending, Running, true, OpRestoring},
		{Pending, Standby, true, OpRestoring},
		{Pending, Running, false, OpProvisioning},
		{Pending, Standby, false, OpProvisioning},
		{Pending, Pending, false, OpNone},
		{Pending, Pending, true, OpNone},
		{Standby, Running, true, OpStarting},
		{Standby, Pending, false, OpArchiving},
		{Standby, Standby, true, OpNone},
		{Running, Standby, true, OpStopping},
		{Running, Pending, true, OpStopping},
		{Running, Running, false, OpNone},
		{Error, Running, true, OpNone},
		{Error, Pending, false, OpNone},
		{Error, Deleted, false, OpDeleting},
		{Running, Deleted, false, OpDeleting},
	}
	for _, tt := range tests {
		if got := Plan(tt.observed, tt.desired, tt.archive); got != tt.want {
			t.Errorf("Plan(%s, %s, archive=%v) = %s, want %s", tt.observed, tt.desired, tt.archive, got, tt.want)
		}
	}
}

// apply is what a successful operation does to the world, as the monitor
// then observes it.
func apply(op Operation, hasArchive bool) (Status, bool) {
	switch op {
	case OpArchiving:
		return Pending, true
	}
	return op.Target(), hasArchive
}

// Every (observed, desired, archive) converges in at most 2 operations.
func TestPlanConvergesInTwoSteps(t *testing.T) {
	states := []Status{Pending, Standby, Running}
	rapid.Check(t, func(t *rapid.T) {
		observed := rapid.SampledFrom(states).Draw(t, "observed")
		desired := rapid.SampledFrom(states).Draw(t, "desired")
		archive := rapid.Bool().Draw(t, "archive")
		if observed != Pending && rapid.Bool().Draw(t, "flip") {
			archive = !archive
		}
		ops := 0
		for observed != desired {
			op := Plan(observed, desired, archive)
			if op == OpNone {
				t.Fatalf("stuck at %s wanting %s (archive %v)", observed, desired, archive)
			}
			if op.Target().Level() < 0 {
				t.Fatalf("op %s has no target", op)
			}
			observed, archive = apply(op, archive)
			ops++
			if ops > 2 {
				t.Fatalf("more than 2 operations")
			}
		}
		if op := Plan(observed, desired, archive); op != OpNone {
			t.Fatalf("converged but planned %s", op)
		}
	})
}
