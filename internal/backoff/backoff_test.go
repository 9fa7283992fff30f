package backoff

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
)

func TestDelayGrowsAndCaps(t *testing.T) {
	p := Policy{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: -1}
	want := []time.Duration{10, 20, 40, 80, 100, 100}
	for i, w := range want {
		if got := p.Delay(i); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if got := p.Delay(10_000); got != 100*time.Millisecond {
		t.Errorf("Delay(huge) = %v, want the cap", got)
	}
}

func TestDelayJitterStaysInBand(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := p.Delay(1) // nominal 200ms
		if d < 100*time.Millisecond || d > 300*time.Millisecond {
			t.Fatalf("Delay(1) = %v outside 200ms ± 50%%", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct delays in 1000 draws: no jitter", len(seen))
	}
	if d := (Policy{Initial: time.Second, Max: time.Second, Jitter: 1}).Delay(5); d > time.Second {
		t.Fatalf("jitter pushed delay %v above Max", d)
	}
}

func TestZeroPolicyDefaults(t *testing.T) {
	d := Policy{}.Delay(0)
	lo, hi := time.Duration(float64(DefaultInitial)*(1-DefaultJitter)), time.Duration(float64(DefaultInitial)*(1+DefaultJitter))
	if d < lo || d > hi {
		t.Fatalf("zero policy Delay(0) = %v, want within [%v, %v]", d, lo, hi)
	}
}

func TestRetry(t *testing.T) {
	fast := Policy{Initial: time.Microsecond, Max: time.Microsecond}
	boom := errors.New("boom")
	tests := []struct {
		name      string
		policy    Policy
		failures  int   // calls that fail before success
		permanent bool  // the first failure is permanent
		wantCalls int   //
		wantIs    error // nil = success
	}{
		{"success first", fast, 0, false, 1, nil},
		{"success after 3", fast, 3, false, 4, nil},
		{"permanent stops", fast, 5, true, 1, boom},
		{"attempts exhausted", Policy{Initial: time.Microsecond, MaxAttempts: 3}, 10, false, 3, ErrAttemptsExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := tt.policy.Retry(t.Context(), func(context.Context) error {
				calls++
				if calls <= tt.failures {
					if tt.permanent {
						return Permanent(boom)
					}
					return boom
				}
				return nil
			})
			if calls != tt.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tt.wantCalls)
			}
			if tt.wantIs == nil && err != nil {
				t.Errorf("err = %v, want nil", err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.wantIs)
			}
			if tt.permanent && IsPermanent(err) {
				t.Errorf("Retry returned the Permanent wrapper, want it unwrapped")
			}
		})
	}
}

func TestRetryStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	stop := errors.New("stop now")
	boom := errors.New("boom")
	calls := 0
	err := Policy{Initial: time.Hour}.Retry(ctx, func(context.Context) error {
		calls++
		cancel(stop) // the wait after this failure must end at once
		return boom
	})
	if calls != 1 || !errors.Is(err, stop) || !errors.Is(err, boom) {
		t.Fatalf("calls=%d err=%v; want 1 call and an error wrapping both the cause and the last failure", calls, err)
	}
}

func TestPermanent(t *testing.T) {
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
	base := errors.New("x")
	wrapped := Permanent(base)
	if !IsPermanent(wrapped) || !errors.Is(wrapped, base) || wrapped.Error() != "x" {
		t.Fatalf("Permanent wrapper misbehaves: %v", wrapped)
	}
	if IsPermanent(base) {
		t.Fatal("plain error reported permanent")
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(t.Context(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on cancelled ctx = %v", err)
	}
}

// Retry waits on Policy.Clock: with a fake clock, hour-long delays pass as
// soon as the test advances it.
func TestRetryWaitsOnTheClock(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	p := Policy{Initial: time.Hour, Max: time.Hour, Jitter: -1, MaxAttempts: 3, Clock: fake}
	done := make(chan error, 1)
	calls := 0
	go func() {
		done <- p.Retry(t.Context(), func(context.Context) error {
			calls++
			if calls < 3 {
				return errors.New("not yet")
			}
			return nil
		})
	}()
	for range 2 {
		fake.BlockUntil(1) // Retry is waiting
		fake.Advance(time.Hour)
	}
	select {
	case err := <-done:
		if err != nil || calls != 3 {
			t.Fatalf("Retry = %v after %d calls, want nil after 3", err, calls)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Retry still waiting after the fake clock passed both delays")
	}
}
