// Package par runs bounded parallel work with error propagation: the one worker pool that
// every gantry subsystem uses instead of hand-rolling goroutines + WaitGroup + a counter.
//
//	err := par.Do(ctx, len(files), runtime.GOMAXPROCS(0), func(ctx context.Context, i int) error {
//		return process(ctx, files[i])
//	})
//
// The first task error cancels the context the other tasks see, no new task starts after it,
// and Do returns it once every started task has returned. For tasks that are not indexed,
// Group is an errgroup with a limit.
package par

import (
	"context"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// Do runs task(ctx, i) for i in [0, n) on at most limit goroutines (limit < 1 means 1) and
// waits for all of them. Tasks are started in index order. It returns the first error (or
// the cause of ctx if it ended first); the ctx given to tasks is cancelled on the first error.
func Do(ctx context.Context, n, limit int, task func(ctx context.Context, i int) error) error {
	if n <= 0 {
		return context.Cause(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64 // next index to hand out; any worker may Add
	var wg sync.WaitGroup
	for range max(1, min(limit, n)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := task(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// Group runs tasks with at most a fixed number at once; the first error cancels its context.
// It is golang.org/x/sync/errgroup with the limit set at construction.
type Group struct {
	*errgroup.Group
}

// NewGroup returns a Group whose tasks get ctx (cancelled on the first error) and of which at
// most limit run at once (limit < 1 means no limit).
func NewGroup(ctx context.Context, limit int) (*Group, context.Context) {
	g, ctx := errgroup.WithContext(ctx)
	if limit > 0 {
		g.SetLimit(limit)
	}
	return &Group{g}, ctx
}

// OneAtATime returns start, which runs fn in its own goroutine, counted in
// wg, unless the previous run is still going (then start does nothing): a
// periodic pass over 100,000 rows (the reconciler's tick, the monitor's
// pass) runs beside the hint loop instead of blocking it, and an interval
// that ends during a long pass is skipped.
func OneAtATime(wg *sync.WaitGroup, fn func()) (start func()) {
	running := make(chan struct{}, 1)
	return func() {
		select {
		case running <- struct{}{}:
		default:
			return
		}
		wg.Go(func() {
			defer func() { <-running }()
			fn()
		})
	}
}
