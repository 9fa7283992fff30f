package par

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDoRunsEveryIndexOnceWithinLimit(t *testing.T) {
	const n, limit = 1000, 3
	var seen [n]atomic.Int32
	var running, peak atomic.Int32
	err := Do(t.Context(), n, limit, func(_ context.Context, i int) error {
		r := running.Add(1)
		for {
			p := peak.Load()
			if r <= p || peak.CompareAndSwap(p, r) {
				break
			}
		}
		seen[i].Add(1)
		running.Add(-1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			t.Fatalf("index %d ran %d times", i, c)
		}
	}
	if p := peak.Load(); p > limit {
		t.Fatalf("%d tasks ran at once, limit %d", p, limit)
	}
}

func TestDoFirstErrorCancelsTheRest(t *testing.T) {
	boom := errors.New("boom")
	var started atomic.Int32
	err := Do(t.Context(), 1000, 2, func(ctx context.Context, i int) error {
		started.Add(1)
		if i == 3 {
			return boom
		}
		if i > 3 {
			<-ctx.Done() // a task running beside the failure sees cancellation
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if s := started.Load(); s > 10 {
		t.Fatalf("%d tasks started after the failure", s)
	}
}

func TestDoHonoursCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ran := false
	if err := Do(ctx, 5, 2, func(context.Context, int) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("err=%v ran=%v on a cancelled context", err, ran)
	}
	if err := Do(t.Context(), 0, 2, nil); err != nil {
		t.Fatalf("n=0: %v", err)
	}
}

func TestGroupLimit(t *testing.T) {
	g, ctx := NewGroup(t.Context(), 2)
	var running, peak atomic.Int32
	for range 50 {
		g.Go(func() error {
			r := running.Add(1)
			if r > peak.Load() {
				peak.Store(r)
			}
			running.Add(-1)
			return ctx.Err()
		})
	}
	if err := g.Wait(); err != nil || peak.Load() > 2 {
		t.Fatalf("err=%v peak=%d", err, peak.Load())
	}
}
