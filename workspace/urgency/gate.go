package urgency

import (
	"sync"
	"time"
)

// DefaultMaxYield bounds how long one bulk batch, or one bulk step about
// to start, waits for urgent work in flight: under a stream of users'
// requests the bulk still moves, a batch (grown meanwhile) at least every
// DefaultMaxYield per loop.
const DefaultMaxYield = 20 * time.Millisecond

// Gate counts the urgent work in flight in one process, so that bulk work
// waits for it, a bounded time each (MaxYield). A user's request (the API)
// and the reconcile steps that follow it hold it (BeginUrgent) while they
// are in flight; the store's bulk batches and the reconciler's bulk steps
// about to start wait for it (Idle, AwaitNone). The server makes one and
// gives the same one to the store, the API and the reconciler. Holds are
// per Gate, that is per process: a change made through one replica's API
// does not hold another replica's bulk (they share only the database).
//
// A nil *Gate holds nothing: BeginUrgent's end does nothing, InFlight is
// 0, Idle is closed, AwaitNone returns at once.
type Gate struct {
	maxYield time.Duration // set by NewGate, read-only after

	// mu protects n and idle.
	// Invariant: idle is closed exactly while n == 0.
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

// NewGate returns a Gate with nothing in flight whose waits last at most
// maxYield each; 0 = DefaultMaxYield.
func NewGate(maxYield time.Duration) *Gate {
	if maxYield <= 0 {
		maxYield = DefaultMaxYield
	}
	g := &Gate{maxYield: maxYield, idle: make(chan struct{})}
	close(g.idle)
	return g
}

// BeginUrgent marks urgent work in flight until end is called (once; later
// calls do nothing): meanwhile bulk work waits for it (up to MaxYield).
func (g *Gate) BeginUrgent() (end func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	if g.n == 0 {
		g.idle = make(chan struct{})
	}
	g.n++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			if g.n--; g.n == 0 {
				close(g.idle)
			}
			g.mu.Unlock()
		})
	}
}

// InFlight is how many BeginUrgent holds have not ended.
func (g *Gate) InFlight() int {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// closed is the Idle of a nil Gate.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Idle is closed once no urgent work is in flight (at once if none is). A
// hold begun later makes a new channel: wait on the one taken before.
func (g *Gate) Idle() <-chan struct{} {
	if g == nil {
		return closed
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.idle
}

// MaxYield is how long one wait for Idle lasts at most.
func (g *Gate) MaxYield() time.Duration {
	if g == nil {
		return 0
	}
	return g.maxYield
}

// AwaitNone waits until no urgent work is in flight, at most MaxYield:
// bulk work about to start yields as the store's bulk batches do.
func (g *Gate) AwaitNone() {
	idle := g.Idle()
	select {
	case <-idle:
		return
	default:
	}
	t := time.NewTimer(g.maxYield)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}
