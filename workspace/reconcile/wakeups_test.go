package reconcile

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/wstest"
)

func TestWakeupsEarliestWins(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	w := newWakeups(clk)
	w.at("a", 3*time.Second)
	w.at("b", time.Second)
	w.at("a", 2*time.Second) // earlier: replaces a's 3 s
	w.at("b", 5*time.Second) // later: b keeps 1 s
	if ready, next := w.popDue(); len(ready) != 0 || next.Sub(clk.Now()) != time.Second+time.Millisecond {
		t.Fatalf("at start: ready %v, next in %v; want none, 1.001s", ready, next.Sub(clk.Now()))
	}
	clk.Advance(time.Second + time.Millisecond)
	if ready, next := w.popDue(); len(ready) != 1 || ready[0] != "b" || next.Sub(clk.Now()) != time.Second {
		t.Fatalf("after 1.001 s: ready %v, next in %v; want [b], 1s", ready, next.Sub(clk.Now()))
	}
	clk.Advance(10 * time.Second)
	if ready, _ := w.popDue(); len(ready) != 1 || ready[0] != "a" {
		t.Fatalf("after 11 s: ready %v, want [a] once (its 3 s entry was superseded)", ready)
	}
	if n := w.pending(); n != 0 {
		t.Fatalf("%d wake-ups left, want 0", n)
	}
}

func TestWakeupsRunFiresOnTheClock(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	w := newWakeups(clk)
	w.at("x", time.Minute)
	fired := make(chan string, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, func(id string) { fired <- id }) }()
	defer func() { cancel(); <-done }()
	clk.BlockUntil(1) // run armed a timer
	// run may replace that timer (at's kick) with one computed from a clock
	// read taken before an Advance, so advance until x fires; it must fire
	// on the fake clock, never on its own.
	deadline := time.After(10 * time.Second)
	for {
		clk.Advance(time.Minute + time.Millisecond)
		select {
		case id := <-fired:
			if id != "x" {
				t.Fatalf("fired %q, want x", id)
			}
			return
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("x not fired after its time passed")
		}
	}
}

func TestRetryPolicyDoublesToTheCap(t *testing.T) {
	c := Config{RetryBackoff: 30 * time.Second, MaxRetries: 10}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	failed := callResult(errors.New("no engine"))
	for n, want := range []time.Duration{30, 60, 120, 240, 480, 960, 960} {
		w := workspace.Workspace{ID: "w", Operation: workspace.OpStarting, OpStartedAt: &now, ErrorCount: n}
		d := workspace.Decide(w, workspace.Observation{Call: &failed}, now, c.policy())
		if d.RetryAt == nil || d.RetryAt.Sub(now) != want*time.Second {
			t.Errorf("retry %d: %v, retry at %v, want after %v", n, d.Action, d.RetryAt, want*time.Second)
		}
	}
}

// TestRetryWaitsForBackoffOnTheClock: a failed start is retried when the
// reconciler's clock has moved by RECONCILER_RETRY_BACKOFF, not before.
func TestRetryWaitsForBackoffOnTheClock(t *testing.T) {
	for _, b := range recBackends {
		t.Run(b.Name, func(t *testing.T) { testRetryWaitsForBackoff(t, b.open(t)) })
	}
}

func testRetryWaitsForBackoff(t *testing.T, st testStore) {
	ctx := t.Context()
	fk := fake.New(0)
	clk := clock.NewFake(time.Now())
	h := startHarness(t, st, fk, hints.NewLocal(), Config{Clock: clk, RetryBackoff: 10 * time.Second, MaxRetries: 3})
	w, err := st.Create(ctx, workspace.NewWorkspace{Name: "w", Desired: workspace.Standby}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h.rec.hints.Publish(ctx, hints.ChanWorkspace, w.ID) // the clock does not tick: hints drive it
	h.waitState(t, w.ID, workspace.Standby, 10*time.Second)

	fk.Fail(fake.Start, w.ID, 1)
	if _, err := st.SetDesired(ctx, w.ID, workspace.Running, time.Now()); err != nil {
		t.Fatal(err)
	}
	h.rec.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
	retryAt := clk.Now().Add(10 * time.Second)
	wstest.WaitFor(t, 10*time.Second, "the retry to be scheduled 10 s ahead", func() (bool, string) {
		h.rec.wake.mu.Lock()
		due := h.rec.wake.due[w.ID]
		h.rec.wake.mu.Unlock()
		return !due.Before(retryAt) && due.Before(retryAt.Add(time.Second)), due.String()
	})
	if n := fk.Calls(w.ID, fake.Start); n != 1 {
		t.Fatalf("start calls before the backoff passed = %d, want 1", n)
	}
	clk.Advance(10*time.Second + time.Millisecond)
	got := h.waitState(t, w.ID, workspace.Running, 10*time.Second)
	if n := fk.Calls(w.ID, fake.Start); n != 2 || got.ErrorCount != 0 {
		t.Fatalf("after the backoff: %d start calls (want 2), %s", n, wstest.Describe(got))
	}
}

// TestWakeupsFireWhenTheClockPassesWhileTheTimerIsMade: the loop reads
// the clock, then makes its timer; a fake clock advanced past the due time
// in between must still poke. Before the fix the timer was set for the
// whole wait after the advance and never fired (a CI run of
// TestRetryWaitsForBackoffOnTheClock timed out so).
func TestWakeupsFireWhenTheClockPassesWhileTheTimerIsMade(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	w := newWakeups(clk)
	w.at("a", 10*time.Second)
	<-w.kick // taken, as by a turn of the loop that began before the at
	var once sync.Once
	w.beforeTimer = func() { once.Do(func() { clk.Advance(10*time.Second + time.Millisecond) }) }
	poked := make(chan string, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go w.run(ctx, func(id string) { poked <- id })
	select {
	case <-poked:
	case <-time.After(5 * time.Second):
		t.Fatal("no poke 5 s after the clock passed the due time")
	}
}
