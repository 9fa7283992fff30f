package dsort

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/lifecycle"
)

func newSM(t *testing.T) *StateMachine {
	t.Helper()
	sm, err := NewStateMachine("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sm
}

// Seed 000 §10: "allow valid transitions".
func TestStateMachineAllowsValidTransitions(t *testing.T) {
	sm := newSM(t)
	if sm.State() != Initializing {
		t.Fatalf("initial state %v", sm.State())
	}
	for _, s := range []State{Sampling, WaitingForPartitionConfig, Sorting, WaitingForShuffleSignal,
		Shuffling, WaitingForMergeSignal, Merging, Completed} {
		if err := sm.Transition(s, "test"); err != nil {
			t.Fatal(err)
		}
		if sm.State() != s {
			t.Fatalf("state %v, want %v", sm.State(), s)
		}
	}
}

// Seed 000 §10: "reject invalid transitions".
func TestStateMachineRejectsInvalidTransitions(t *testing.T) {
	sm := newSM(t)
	if err := sm.Transition(Sampling, "test"); err != nil {
		t.Fatal(err)
	}
	err := sm.Transition(Shuffling, "test")
	if !errors.Is(err, lifecycle.ErrInvalidTransition) {
		t.Fatalf("Sampling -> Shuffling: err = %v", err)
	}
	if sm.State() != Sampling {
		t.Fatalf("state changed to %v", sm.State())
	}
}

// The whole table: exactly the seed's edges are allowed.
func TestStateTableMatchesSeed(t *testing.T) {
	next := func(s State) State { return s + 1 }
	sm := newSM(t)
	for from := Initializing; from <= Failed; from++ {
		for to := Initializing; to <= Failed; to++ {
			want := false
			switch {
			case from < Completed && (to == next(from) || to == Failed):
				want = true
			case from == Failed && to == Initializing:
				want = true
			}
			if got := sm.CanTransition(from, to); got != want {
				t.Errorf("%v -> %v allowed = %v, want %v", from, to, got, want)
			}
		}
	}
	for s := Initializing; s <= Failed; s++ {
		if got, err := ParseState(s.String()); err != nil || got != s {
			t.Errorf("ParseState(%q) = %v, %v", s.String(), got, err)
		}
	}
	if !Completed.IsTerminal() || !Failed.IsTerminal() || Merging.IsTerminal() {
		t.Error("IsTerminal wrong")
	}
}

// Seed 000 §10: "track state history".
func TestStateMachineTracksHistory(t *testing.T) {
	sm := newSM(t)
	for i, s := range []State{Sampling, WaitingForPartitionConfig, Sorting} {
		if err := sm.Transition(s, []string{"reason1", "reason2", "reason3"}[i]); err != nil {
			t.Fatal(err)
		}
	}
	type tr struct {
		From, To State
		Reason   string
	}
	var got []tr
	for _, h := range sm.History() {
		got = append(got, tr{h.From, h.To, h.Reason})
	}
	want := []tr{{Initializing, Sampling, "reason1"}, {Sampling, WaitingForPartitionConfig, "reason2"},
		{WaitingForPartitionConfig, Sorting, "reason3"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatal(d)
	}
}

// Seed 000 §10: "allow Failed -> Initializing for restart".
func TestStateMachineAllowsRestartAfterFailure(t *testing.T) {
	sm := newSM(t)
	for _, s := range []State{Sampling, Failed, Initializing} {
		if err := sm.Transition(s, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if sm.State() != Initializing {
		t.Fatal(sm.State())
	}
}

// Seed 000 §9: phase durations for Sampling, Sorting, Shuffling, Merging only.
func TestStateMachinePhaseDurations(t *testing.T) {
	sm := newSM(t)
	for s := Sampling; s <= Completed; s++ {
		if err := sm.Transition(s, "x"); err != nil {
			t.Fatal(err)
		}
	}
	var got []State
	for _, p := range sm.Phases() {
		if !p.Done || p.Duration() < 0 {
			t.Errorf("phase %+v not closed", p)
		}
		got = append(got, p.Phase)
	}
	if d := cmp.Diff([]State{Sampling, Sorting, Shuffling, Merging}, got); d != "" {
		t.Fatal(d)
	}
}

// Seed 000 §8.2: the state is saved on every transition, under the worker's
// own directory, with the history so far.
func TestStateMachinePersistsUnderDir(t *testing.T) {
	dir := t.TempDir()
	sm, err := NewStateMachine(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, to := range []State{Sampling, WaitingForPartitionConfig, Sorting, Failed, Initializing} {
		reason := fmt.Sprint("reason ", i)
		if err := sm.Transition(to, reason); err != nil {
			t.Fatal(err)
		}
		snap, err := lifecycle.LoadSnapshot(filepath.Join(dir, StateFileName))
		if err != nil {
			t.Fatal(err)
		}
		n := len(snap.History)
		if st, err := ParseState(snap.State); err != nil || st != to || n != i+1 ||
			snap.History[n-1].To != to.String() || snap.History[n-1].Reason != reason {
			t.Fatalf("after -> %s: persisted %q with history %+v", to, snap.State, snap.History)
		}
	}
}

func TestProgressBands(t *testing.T) {
	cases := []struct {
		s    State
		frac float64
		want float64
	}{
		{Initializing, 0, 0}, {Sampling, 0, 10}, {WaitingForPartitionConfig, 0, 15},
		{Sorting, 0.5, 35}, {WaitingForShuffleSignal, 0, 55}, {Shuffling, 1, 80},
		{WaitingForMergeSignal, 0, 80}, {Merging, 0.5, 90}, {Completed, 0, 100}, {Failed, 1, 0},
		{Sorting, 2, 55},
	}
	for _, c := range cases {
		if got := Progress(c.s, c.frac); got != c.want {
			t.Errorf("Progress(%v, %v) = %v, want %v", c.s, c.frac, got, c.want)
		}
	}
}

// FuzzParseState: ParseState accepts exactly the names String produces.
func FuzzParseState(f *testing.F) {
	for s := Initializing; s <= Failed; s++ {
		f.Add(s.String())
	}
	f.Add("State(42)")
	f.Add("")
	f.Fuzz(func(t *testing.T, name string) {
		s, err := ParseState(name)
		if err != nil {
			return
		}
		if s.String() != name {
			t.Fatalf("ParseState(%q) = %v, which prints as %q", name, s, s.String())
		}
	})
}

// TestPhaseProgressWithinAPhase: seed 000 §7.1's progress inside a phase
// (getSortProgress, getShuffleProgress, getMergeProgress): what the phase
// has done of its total moves the worker through its band, in the
// percentage and the message ("Sorting: 25%", "Shuffling: 50%", "Merging:
// 25%"), the waiting states count as the phase before, and a new phase
// starts again from 0.
func TestPhaseProgressWithinAPhase(t *testing.T) {
	tr := &phaseTracker{sm: newSM(t), clock: clock.Or(nil), metrics: newMetrics(nil, workerRole), logger: slog.New(slog.DiscardHandler)}
	for _, s := range []State{Sampling, WaitingForPartitionConfig} {
		if err := tr.start(s, "", 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.start(Sorting, "", 400); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		add  int64
		pct  float64
		text string
	}{{0, 15, "Sorting: 0%"}, {100, 25, "Sorting: 25%"}, {200, 45, "Sorting: 75%"}, {100, 55, "Sorting: 100%"}} {
		tr.done.Add(c.add)
		if got, msg := tr.progress(Sorting), tr.message(Sorting); got != c.pct || msg != c.text {
			t.Errorf("after %d more: progress %v %q, want %v %q", c.add, got, msg, c.pct, c.text)
		}
	}
	if err := tr.start(WaitingForShuffleSignal, "", 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.start(Shuffling, "", 10); err != nil {
		t.Fatal(err)
	}
	tr.done.Add(5)
	if got, msg := tr.progress(Shuffling), tr.message(Shuffling); got != 67.5 || msg != "Shuffling: 50%" {
		t.Errorf("shuffling half done: progress %v %q, want 67.5 \"Shuffling: 50%%\"", got, msg)
	}
	if err := tr.start(WaitingForMergeSignal, "", 0); err != nil {
		t.Fatal(err)
	}
	if got, msg := tr.progress(WaitingForMergeSignal), tr.message(WaitingForMergeSignal); got != 80 ||
		msg != "Shuffle complete, waiting for merge signal" {
		t.Errorf("waiting for the merge: progress %v %q", got, msg)
	}
	if err := tr.start(Merging, "", 200); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		add  int64
		pct  float64
		text string
	}{{0, 80, "Merging: 0%"}, {50, 85, "Merging: 25%"}, {150, 100, "Merging: 100%"}} {
		tr.done.Add(c.add)
		if got, msg := tr.progress(Merging), tr.message(Merging); got != c.pct || msg != c.text {
			t.Errorf("merging, after %d more: progress %v %q, want %v %q", c.add, got, msg, c.pct, c.text)
		}
	}
	if err := tr.start(Completed, "", 0); err != nil {
		t.Fatal(err)
	}
	if got, msg := tr.progress(Completed), tr.message(Completed); got != 100 || msg != "All phases completed" {
		t.Errorf("completed: progress %v %q", got, msg)
	}
}
