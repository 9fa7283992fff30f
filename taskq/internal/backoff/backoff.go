// Package backoff is a stand-in for internal/backoff until that package
// lands on main; it has the same API subset taskq uses (Policy.Delay, Sleep).
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Policy is exponential backoff with jitter; zero values mean 100ms, 30s,
// 2.0, 0.2.
type Policy struct {
	Initial, Max       time.Duration
	Multiplier, Jitter float64
	MaxAttempts        int
}

// Delay returns the wait before retry number attempt (0 = first retry).
func (p Policy) Delay(attempt int) time.Duration {
	if p.Initial <= 0 {
		p.Initial = 100 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 30 * time.Second
	}
	if p.Multiplier <= 0 {
		p.Multiplier = 2
	}
	if p.Jitter == 0 {
		p.Jitter = 0.2
	}
	d := float64(p.Initial) * math.Pow(p.Multiplier, float64(attempt))
	if d > float64(p.Max) {
		d = float64(p.Max)
	}
	d *= 1 + p.Jitter*(2*rand.Float64()-1)
	if d > float64(p.Max) {
		d = float64(p.Max)
	}
	return time.Duration(d)
}

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
