package store

import (
	"sync"
	"sync/atomic"
	"time"
)

// Work a user asked for goes first (package urgency has the whole
// story). Two things carry it through the store:
//
//   - the urgency.Mark on a context: its statements skip the batches
//     (batch.go), so they never queue behind bulk statements;
//   - BeginUrgent, held by a user's request (the API) and by the steps that
//     follow it (the reconciler) while they are in flight: meanwhile the
//     bulk batches of this store wait before they start (yieldToUrgent), at
//     most maxYield each. An urgent statement that skips the queue still
//     needs the CPUs, this process's and, on one machine, the database's;
//     with 100,000 workspaces converging both are saturated, and a user's
//     request of half a dozen statements waited behind the bulk's for the
//     CPU at every one of them. Bulk batches that wait grow meanwhile, so
//     the bulk loses less than the time it yields. Holds are per Store,
//     that is per process: a change made through one replica's API does
//     not hold another replica's bulk (they share only the database).

// maxYield bounds how long one bulk batch waits for urgent work in flight:
// under a stream of users' requests the bulk still moves, a batch (grown
// meanwhile) at least every maxYield per loop.
const maxYield = 20 * time.Millisecond

// urgentGate counts the urgent work in flight.
// Invariant: idle is closed exactly while n == 0.
type urgentGate struct {
	mu   sync.Mutex
	n    int
	idle chan struct{}
	// maxYield is the const's value in nanoseconds (tests change it).
	maxYield atomic.Int64
}

func newUrgentGate() *urgentGate {
	g := &urgentGate{idle: make(chan struct{})}
	g.maxYield.Store(int64(maxYield))
	close(g.idle)
	return g
}

// BeginUrgent marks urgent work in flight until end is called (once; later
// calls do nothing): meanwhile bulk batches wait for it (up to maxYield).
func (s *Store) BeginUrgent() (end func()) { return s.urgent.begin() }

func (g *urgentGate) begin() (end func()) {
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

// idleCh is closed once no urgent work is in flight (at once if none is).
func (g *urgentGate) idleCh() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.idle
}

// UrgentInFlight is how many BeginUrgent holds have not ended.
func (s *Store) UrgentInFlight() int {
	s.urgent.mu.Lock()
	defer s.urgent.mu.Unlock()
	return s.urgent.n
}

// AwaitNoUrgent waits until no urgent work is in flight, at most the bound
// bulk batches wait (maxYield): bulk work about to start yields like them,
// through the same wait as the batcher's read loop.
func (s *Store) AwaitNoUrgent() { s.batch.yieldToUrgent(nil, nil) }
