package lifecycle

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type light int

const (
	red light = iota
	green
	yellow
	broken
)

func (l light) String() string {
	return [...]string{"Red", "Green", "Yellow", "Broken"}[l]
}

// fakeClock advances one second per call.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { c.t = c.t.Add(time.Second); return c.t }

func newLight(t *testing.T, path string) (*Machine[light], *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, err := New(Config[light]{
		Initial:     red,
		Transitions: map[light][]light{red: {green, broken}, green: {yellow, broken}, yellow: {red, broken}},
		Phases:      []light{green, yellow},
		PersistPath: path,
		Now:         clk.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, clk
}

func TestMachineValidTransitions(t *testing.T) {
	m, _ := newLight(t, "")
	for _, to := range []light{green, yellow, red} {
		if err := m.Transition(to, "tick"); err != nil {
			t.Fatalf("Transition(%v): %v", to, err)
		}
		if got := m.State(); got != to {
			t.Fatalf("State = %v, want %v", got, to)
		}
	}
}

func TestMachineRejectsInvalidTransition(t *testing.T) {
	m, _ := newLight(t, "")
	err := m.Transition(yellow, "skip")
	if !errors.Is(err, ErrInvalidTransition) {
		t.Fatalf("err = %v, want ErrInvalidTransition", err)
	}
	var te *TransitionError
	if !errors.As(err, &te) || te.From != "Red" || te.To != "Yellow" {
		t.Fatalf("err = %#v, want TransitionError Red -> Yellow", err)
	}
	if m.State() != red || len(m.History()) != 0 {
		t.Fatalf("a rejected transition changed the machine: %v %v", m.State(), m.History())
	}
	// Terminal state: no entry in the table.
	if err := m.Transition(broken, "x"); err != nil {
		t.Fatal(err)
	}
	if err := m.Transition(red, "x"); !errors.Is(err, ErrInvalidTransition) {
		t.Fatalf("leaving a terminal state: err = %v", err)
	}
}

func TestMachineHistoryAndPhases(t *testing.T) {
	m, _ := newLight(t, "")
	for i, to := range []light{green, yellow, red} {
		if err := m.Transition(to, "r"+string(rune('1'+i))); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	wantH := []Transition[light]{
		{From: red, To: green, At: sec(1), Reason: "r1"},
		{From: green, To: yellow, At: sec(2), Reason: "r2"},
		{From: yellow, To: red, At: sec(3), Reason: "r3"},
	}
	if d := cmp.Diff(wantH, m.History()); d != "" {
		t.Fatalf("history (-want +got):\n%s", d)
	}
	wantP := []PhaseDuration[light]{
		{Phase: green, Start: sec(1), End: sec(2), Done: true},
		{Phase: yellow, Start: sec(2), End: sec(3), Done: true},
	}
	if d := cmp.Diff(wantP, m.Phases()); d != "" {
		t.Fatalf("phases (-want +got):\n%s", d)
	}
	if err := m.Transition(green, "again"); err != nil {
		t.Fatal(err)
	}
	ph := m.Phases()
	if last := ph[len(ph)-1]; last.Done || last.Phase != green || last.Duration() != time.Second {
		t.Fatalf("open phase = %+v, want open Green of 1s", last)
	}
	var sb strings.Builder
	m.WritePhases(&sb)
	if want := "Green: 1.00s\nYellow: 1.00s\nGreen: in progress"; !strings.HasPrefix(sb.String(), want) {
		t.Fatalf("WritePhases = %q, want prefix %q", sb.String(), want)
	}
	sb.Reset()
	m.WriteHistory(&sb)
	if want := "[+0.0s] Red -> Green: r1\n[+1.0s] Green -> Yellow: r2\n"; !strings.HasPrefix(sb.String(), want) {
		t.Fatalf("WriteHistory = %q, want prefix %q", sb.String(), want)
	}
}

func TestMachineRequire(t *testing.T) {
	m, _ := newLight(t, "")
	if err := m.Require(red, green); err != nil {
		t.Fatal(err)
	}
	err := m.Require(green, yellow)
	var se *StateError
	if !errors.Is(err, ErrUnexpectedState) || !errors.As(err, &se) {
		t.Fatalf("err = %v", err)
	}
	if d := cmp.Diff(&StateError{Want: []string{"Green", "Yellow"}, Got: "Red"}, se); d != "" {
		t.Fatal(d)
	}
	if !m.Is(yellow, red) || m.Is(green) {
		t.Fatal("Is disagrees with State")
	}
}

func TestMachinePersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	m, _ := newLight(t, path)
	s, err := LoadSnapshot(path)
	if err != nil || s.State != "Red" {
		t.Fatalf("initial snapshot = %+v, %v", s, err)
	}
	if err := m.Transition(green, "go"); err != nil {
		t.Fatal(err)
	}
	s, err = LoadSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != "Green" || len(s.History) != 1 || s.History[0].Reason != "go" || s.History[0].From != "Red" {
		t.Fatalf("snapshot = %+v", s)
	}
	if m.PersistErr() != nil {
		t.Fatal(m.PersistErr())
	}
	// No temporary files left behind.
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("dir holds %d entries, want only state.json", len(ents))
	}
	if _, err := LoadSnapshot(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing snapshot: err = %v", err)
	}
}

func TestMachinePersistFailureKeepsState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing-dir", "state.json")
	m, _ := newLight(t, path)
	if m.PersistErr() == nil {
		t.Fatal("want a persist error for a missing directory")
	}
	if err := m.Transition(green, "go"); err != nil {
		t.Fatal(err)
	}
	if m.State() != green {
		t.Fatal("state not changed")
	}
}

func TestNewRejectsEmptyTable(t *testing.T) {
	if _, err := New(Config[light]{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("err = %v, want ErrConfig", err)
	}
}

func TestOnTransition(t *testing.T) {
	var got []string
	m, err := New(Config[light]{
		Transitions:  map[light][]light{red: {green}},
		OnTransition: func(tr Transition[light]) { got = append(got, tr.From.String()+">"+tr.To.String()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Transition(green, ""); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"Red>Green"}, got); d != "" {
		t.Fatal(d)
	}
}

func TestGroupCancelsOthersOnError(t *testing.T) {
	boom := errors.New("boom")
	drained := make(chan struct{})
	err := Group(t.Context(),
		RunnerFunc(func(ctx context.Context) error { return boom }),
		RunnerFunc(func(ctx context.Context) error { <-ctx.Done(); close(drained); return nil }),
	)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	select {
	case <-drained:
	default:
		t.Fatal("Group returned before the other runner drained")
	}
}

func TestGroupStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- Group(ctx, RunnerFunc(func(ctx context.Context) error { close(started); <-ctx.Done(); return nil }))
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Group did not return after cancel")
	}
}

func TestStopWithin(t *testing.T) {
	if err := StopWithin(time.Second, func() {}, func() { t.Error("force called") }); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var forced atomic.Bool
	err := StopWithin(10*time.Millisecond, func() { <-release }, func() { forced.Store(true); close(release) })
	if !errors.Is(err, ErrStopTimeout) || !forced.Load() {
		t.Fatalf("err = %v, forced = %v", err, forced.Load())
	}
}

func TestWatchdog(t *testing.T) {
	fired := make(chan struct{})
	StartWatchdog(time.Millisecond, func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("watchdog did not fire")
	}
	w := StartWatchdog(time.Hour, func() { t.Error("fired") })
	if !w.Stop() || w.Stop() {
		t.Fatal("Stop: want true then false")
	}
	var nilW *Watchdog
	nilW.Stop()
}

func TestStopper(t *testing.T) {
	var s Stopper
	if s.Stopped() {
		t.Fatal("stopped before Stop")
	}
	s.Stop()
	s.Stop()
	<-s.Done()
	if !s.Stopped() {
		t.Fatal("not stopped")
	}
}

// TestRunSteps: a hung step is cut off at its bound and the next one runs.
func TestRunSteps(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var ran []string
	var told []string
	start := time.Now()
	cut := RunSteps(func(s Step) { told = append(told, s.Name) },
		Step{Name: "a", Bound: time.Second, Run: func() { ran = append(ran, "a") }},
		Step{Name: "hang", Bound: 200 * time.Millisecond, Run: func() { <-release }},
		Step{Name: "b", Bound: time.Second, Run: func() { ran = append(ran, "b") }})
	el := time.Since(start)
	if !slices.Equal(cut, []string{"hang"}) || !slices.Equal(told, cut) || !slices.Equal(ran, []string{"a", "b"}) {
		t.Fatalf("cut %v, told %v, ran %v", cut, told, ran)
	}
	if el < 200*time.Millisecond || el > 2*time.Second {
		t.Fatalf("took %s, want about the hung step's 200ms bound", el)
	}
}

// A transition is logged at Info unless TransitionLevel says otherwise.
func TestTransitionLogLevel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level slog.Level
		want  string
	}{
		{"default", 0, "level=INFO"},
		{"debug", slog.LevelDebug, "level=DEBUG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf strings.Builder
			m, err := New(Config[light]{
				Transitions:     map[light][]light{red: {green}},
				TransitionLevel: tc.level,
				Logger:          slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Transition(green, "go"); err != nil {
				t.Fatal(err)
			}
			if line := buf.String(); !strings.Contains(line, tc.want) || !strings.Contains(line, `msg="state transition" from=Red to=Green reason=go`) {
				t.Fatalf("log %q; want %s with the transition", line, tc.want)
			}
		})
	}
}
