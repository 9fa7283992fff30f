// Package clock gives components a seam over time so that timeouts, leases and TTLs can be
// tested without sleeping: production code takes a Clock (nil = Real()), tests pass a *Fake
// and move it with Advance.
//
//	c := clock.NewFake(time.Unix(0, 0))
//	lease := NewLease(c, 30*time.Second)
//	c.BlockUntil(1)             // wait until the lease's timer is armed
//	c.Advance(31 * time.Second) // fires it, no real wait
//
// For whole-package time virtualisation, testing/synctest is the alternative; Fake is for
// components whose tests also talk to real services (Redis, Postgres), which synctest forbids.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock is the subset of package time that components depend on.
type Clock interface {
	Now() time.Time
	Since(t time.Time) time.Duration
	After(d time.Duration) <-chan time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is the part of *time.Timer components use.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is the part of *time.Ticker components use.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Real returns the wall clock.
func Real() Clock { return realClock{} }

// Or returns c, or Real() when c is nil: the one-liner for Config defaults.
func Or(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) Since(t time.Time) time.Duration        { return time.Since(t) }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) NewTimer(d time.Duration) Timer         { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }

// Fake is a manual clock. Time moves only through Advance and Set; timers and tickers whose
// deadline is reached fire then, in deadline order. Safe for concurrent use.
type Fake struct {
	mu      sync.Mutex // protects the fields below
	now     time.Time
	waiters []*fakeWaiter // armed timers and tickers
	changed *sync.Cond    // signalled when waiters changes (BlockUntil)
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock reading t0.
func NewFake(t0 time.Time) *Fake {
	f := &Fake{now: t0}
	f.changed = sync.NewCond(&f.mu)
	return f
}

// fakeWaiter is one armed timer or ticker. period > 0 marks a ticker.
type fakeWaiter struct {
	f      *Fake
	ch     chan time.Time
	when   time.Time
	period time.Duration
}

func (f *Fake) Now() time.Time                         { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *Fake) Since(t time.Time) time.Duration        { return f.Now().Sub(t) }
func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

// NewTimer arms a one-shot timer d after the fake now.
func (f *Fake) NewTimer(d time.Duration) Timer {
	w := &fakeWaiter{f: f, ch: make(chan time.Time, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armLocked(w, d)
	return (*fakeTimer)(w)
}

// NewTicker arms a ticker with period d (d must be > 0, as for time.NewTicker).
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	w := &fakeWaiter{f: f, ch: make(chan time.Time, 1), period: d}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armLocked(w, d)
	return (*fakeTicker)(w)
}

// Advance moves the clock forward by d, firing what comes due.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves the clock to t (never backwards), firing what comes due in deadline order.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		sort.Slice(f.waiters, func(i, j int) bool { return f.waiters[i].when.Before(f.waiters[j].when) })
		if len(f.waiters) == 0 || f.waiters[0].when.After(t) {
			break
		}
		w := f.waiters[0]
		f.now = w.when
		select { // like time's channels: a tick nobody read is dropped
		case w.ch <- w.when:
		default:
		}
		if w.period > 0 {
			w.when = w.when.Add(w.period)
		} else {
			f.disarmLocked(w)
		}
	}
	if t.After(f.now) {
		f.now = t
	}
	f.changed.Broadcast()
}

// BlockUntil waits until at least n timers or tickers are armed: the way a test knows the
// code under test has started waiting before it calls Advance.
func (f *Fake) BlockUntil(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.waiters) < n {
		f.changed.Wait()
	}
}

// Waiters reports how many timers and tickers are armed.
func (f *Fake) Waiters() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.waiters) }

func (f *Fake) armLocked(w *fakeWaiter, d time.Duration) {
	w.when = f.now.Add(d)
	f.waiters = append(f.waiters, w)
	f.changed.Broadcast()
	if d <= 0 && w.period == 0 {
		select {
		case w.ch <- f.now:
		default:
		}
		f.disarmLocked(w)
	}
}

// disarmLocked removes w and reports whether it was armed.
func (f *Fake) disarmLocked(w *fakeWaiter) bool {
	for i, x := range f.waiters {
		if x == w {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			f.changed.Broadcast()
			return true
		}
	}
	return false
}

type fakeTimer fakeWaiter

func (t *fakeTimer) C() <-chan time.Time { return t.ch }
func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.disarmLocked((*fakeWaiter)(t))
}
func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.f.disarmLocked((*fakeWaiter)(t))
	t.f.armLocked((*fakeWaiter)(t), d)
	return was
}

type fakeTicker fakeWaiter

func (t *fakeTicker) C() <-chan time.Time { return t.ch }
func (t *fakeTicker) Stop() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.f.disarmLocked((*fakeWaiter)(t))
}
func (t *fakeTicker) Reset(d time.Duration) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.f.disarmLocked((*fakeWaiter)(t))
	t.period = d
	t.f.armLocked((*fakeWaiter)(t), d)
}
