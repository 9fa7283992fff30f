package taskq

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// stealerParams configure a stealer.
type stealerParams struct {
	r        *rdb.RDB
	assigned map[string]bool // the worker's own queues: never steal targets
	interval time.Duration   // base refresh interval (StealInterval)
	clock    clock.Clock
	m        *metrics
}

// stealer keeps the steal targets: the other known queues with a backlog,
// most loaded first, the one stolen from last moved to the end so that
// several idle workers do not all drain the same queue. The fetcher asks
// for them (targets) and reports steals and misses; the adaptive controller
// stretches the refresh interval under contention (setEvery).
type stealer struct {
	p stealerParams
	loop

	// steals counts tasks taken from other queues: the fetcher Adds, the
	// adaptive controller and the worker record Load (plain counter).
	steals atomic.Int64
	// every is the refresh interval in ns: the adaptive controller Stores,
	// run Loads before each sleep (a stale value only delays a refresh).
	every atomic.Int64

	// mu protects the fields below (fetcher, run and the adaptive controller).
	mu sync.Mutex
	// targets is replaced whole, never modified in place, so current may
	// hand it out without a copy.
	targets    []string
	lastStolen string
	misses     int64 // dequeues that had targets but found nothing; reset by a steal
	// refused holds the queues a stolen task of which had a type this
	// worker has no handler for, until when they are no targets (refuse).
	refused map[string]time.Time
}

// refuseFor is how long a queue whose stolen task this worker could not
// run is no steal target: its own workers serve it meanwhile.
const refuseFor = time.Minute

func newStealer(p stealerParams) *stealer {
	s := &stealer{p: p}
	s.every.Store(int64(p.interval))
	return s
}

// start runs the stealer until stop or until ctx ends.
func (s *stealer) start(ctx context.Context) { s.launch(ctx, s.run) }

// run refreshes the targets every interval until ctx ends.
func (s *stealer) run(ctx context.Context) {
	for {
		s.refresh(ctx)
		if sleep(ctx, s.p.clock, time.Duration(s.every.Load())) != nil {
			return
		}
	}
}

// current returns the targets in order (the caller must not modify it).
func (s *stealer) current() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.targets
}

func (s *stealer) noteSteal(q string) {
	s.steals.Add(1)
	s.p.m.steals.WithLabelValues(q).Inc()
	s.mu.Lock()
	s.lastStolen = q
	s.misses = 0
	s.mu.Unlock()
}

func (s *stealer) noteMiss() {
	s.mu.Lock()
	s.misses++
	s.mu.Unlock()
	s.p.m.stealMisses.Inc()
}

func (s *stealer) missCount() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.misses
}

// refresh reads the queues and their sizes and orders the targets.
func (s *stealer) refresh(ctx context.Context) {
	all, err := s.p.r.Queues(ctx)
	if err != nil {
		return
	}
	var others []string
	for _, q := range all {
		if !s.p.assigned[q] {
			others = append(others, q)
		}
	}
	var targets []string
	if len(others) > 0 {
		sizes, err := s.p.r.Sizes(ctx, others)
		if err != nil {
			return
		}
		for _, q := range others {
			if sizes[q] > 0 {
				targets = append(targets, q)
			}
		}
		s.mu.Lock()
		last := s.lastStolen
		s.mu.Unlock()
		sort.SliceStable(targets, func(i, j int) bool {
			if (targets[i] == last) != (targets[j] == last) {
				return targets[j] == last
			}
			return sizes[targets[i]] > sizes[targets[j]]
		})
	}
	s.mu.Lock()
	s.targets = s.withoutRefused(targets)
	s.mu.Unlock()
}

// refuse takes q out of the targets for refuseFor: a task stolen from it
// had a type this worker cannot run (the task went back, uncounted).
func (s *stealer) refuse(q string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused == nil {
		s.refused = map[string]time.Time{}
	}
	s.refused[q] = s.p.clock.Now().Add(refuseFor)
	s.targets = s.withoutRefused(s.targets)
}

// withoutRefused is targets less the queues refused now (a new slice when
// it drops any: current's callers may hold the old one); s.mu is held.
func (s *stealer) withoutRefused(targets []string) []string {
	now := s.p.clock.Now()
	for q, until := range s.refused {
		if !now.Before(until) {
			delete(s.refused, q)
		}
	}
	if len(s.refused) == 0 {
		return targets
	}
	out := make([]string, 0, len(targets))
	for _, q := range targets {
		if _, ok := s.refused[q]; !ok {
			out = append(out, q)
		}
	}
	return out
}
