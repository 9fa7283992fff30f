// Package backoff is gantry's one retry policy: exponential growth from an initial delay, a cap,
// random jitter, an optional attempt limit, and waits that end when the context does.
//
// Every subsystem retries through it (dsort's dials and pulls, the task queue's retries and
// Redis reconnects, the reconciler's failed operations), so a newcomer learns one policy:
//
//	p := backoff.Policy{Initial: 50 * time.Millisecond, Max: 5 * time.Second, MaxAttempts: 8}
//	err := p.Retry(ctx, func(ctx context.Context) error {
//		conn, err := dial(ctx)
//		if errors.Is(err, errBadToken) {
//			return backoff.Permanent(err) // retrying cannot help
//		}
//		...
//	})
//
// Delay(n) for attempt n (0 = the first retry) is min(Max, Initial·Multiplierⁿ), then spread
// uniformly by ±Jitter of itself, and never above Max.
package backoff

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
)

// Policy describes how long to wait between attempts. The zero value is a usable policy:
// every zero field takes the default named on it.
type Policy struct {
	// Initial is the delay before the first retry. Zero means 100ms.
	Initial time.Duration
	// Max caps every delay. Zero means 30s.
	Max time.Duration
	// Multiplier is the growth per attempt. Zero (or anything below 1) means 2.
	Multiplier float64
	// Jitter spreads each delay uniformly over ±Jitter·delay, so that many clients retrying
	// the same failure do not retry in step. Zero means 0.2; a negative value means none.
	// Values above 1 are treated as 1.
	Jitter float64
	// MaxAttempts bounds the number of calls Retry makes (the first call included).
	// Zero means unlimited: Retry stops only on success, a permanent error or the context.
	MaxAttempts int
	// Clock times Retry's waits. Nil means the real clock; tests pass a *clock.Fake and
	// advance it instead of sleeping.
	Clock clock.Clock
}

// Defaults of the zero Policy.
const (
	DefaultInitial    = 100 * time.Millisecond
	DefaultMax        = 30 * time.Second
	DefaultMultiplier = 2.0
	DefaultJitter     = 0.2
)

// ErrAttemptsExhausted is wrapped, with the last error, into what Retry returns when
// MaxAttempts calls all failed.
var ErrAttemptsExhausted = errors.New("backoff: attempts exhausted")

func (p Policy) withDefaults() Policy {
	if p.Initial <= 0 {
		p.Initial = DefaultInitial
	}
	if p.Max <= 0 {
		p.Max = DefaultMax
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	if p.Multiplier < 1 {
		p.Multiplier = DefaultMultiplier
	}
	switch {
	case p.Jitter == 0:
		p.Jitter = DefaultJitter
	case p.Jitter < 0:
		p.Jitter = 0
	case p.Jitter > 1:
		p.Jitter = 1
	}
	return p
}

// Delay returns the wait before retry number attempt (0 = the first retry), jitter included.
func (p Policy) Delay(attempt int) time.Duration {
	p = p.withDefaults()
	if attempt < 0 {
		attempt = 0
	}
	d := float64(p.Initial) * math.Pow(p.Multiplier, float64(attempt))
	if d > float64(p.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		d = float64(p.Max)
	}
	if p.Jitter > 0 {
		d += d * p.Jitter * (2*rand.Float64() - 1)
	}
	if d > float64(p.Max) {
		d = float64(p.Max)
	}
	if d < 0 {
		d = 0
	}
	return time.Duration(d)
}

// Retry calls fn until it returns nil, returns an error marked Permanent, has been called
// MaxAttempts times, or ctx ends. It returns nil on success; the unwrapped permanent error;
// the last error wrapped with ErrAttemptsExhausted; or, when ctx ends first, the last error
// of fn joined with the context's cause (or the cause alone if fn never failed).
func (p Policy) Retry(ctx context.Context, fn func(ctx context.Context) error) error {
	var last error
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return errors.Join(last, context.Cause(ctx))
		}
		err := fn(ctx)
		if err == nil {
			return nil
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			return perm.err
		}
		last = err
		if p.MaxAttempts > 0 && attempt+1 >= p.MaxAttempts {
			return errors.Join(ErrAttemptsExhausted, last)
		}
		if err := sleep(ctx, clock.Or(p.Clock), p.Delay(attempt)); err != nil {
			return errors.Join(last, err)
		}
	}
}

// Sleep waits for d or until ctx ends, whichever is first. It returns nil after a full wait
// and the context's cause otherwise.
func Sleep(ctx context.Context, d time.Duration) error {
	return sleep(ctx, clock.Real(), d)
}

// sleep is Sleep on the clock c.
func sleep(ctx context.Context, c clock.Clock, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Permanent marks err as one that retrying cannot fix: Retry returns it at once, unwrapped.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err (or anything it wraps) was marked by Permanent.
func IsPermanent(err error) bool {
	var perm *permanentError
	return errors.As(err, &perm)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }
