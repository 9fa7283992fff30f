package dsort

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/gantryhq/gantry/internal/par"
)

// shuffle pulls, from every other worker, its piece of each of this
// worker's partitions (fetcher). Pieces are staged per (sender, sender
// epoch, partition) and committed by rename only once the stream ended with
// its last chunk and the byte count matched: a sender that crashes
// mid-stream leaves nothing behind, and its restarted process's data
// replaces it.
//
// Pieces are taken partition by partition, so the first partitions are
// complete early; each partition whose pieces are all in is merged at once
// (earlyMerges, through m) while the others arrive, and its output goes to
// disk while the shuffle still runs. shuffle returns those merges, for the
// merge phase to wait for; on error they are already stopped.
//
// What a predecessor of this process left in the same job is not done
// again (workDir.adopt, output.prepare): a partition it staged is neither
// fetched nor merged, a piece it committed is not fetched.
func (w *Worker) shuffle(ctx context.Context, f *fetcher, m *merger) (*earlyMerges, error) {
	l := m.layout
	self, nw, ppw := l.self, l.workers, l.ppw
	// This worker's own pieces are not copied: the merge reads them
	// straight from its runs. For each partition, take the senders in turn
	// starting after ourselves, so the workers do not all pull from one.
	w.track.done.Add(int64(ppw))
	em := newEarlyMerges(ctx, min(w.cores, ppw))
	staged := m.out.staged(m.job)
	m.inherited = staged
	left := make([]atomic.Int32, ppw) // pieces still to come, per own partition
	var todo [][2]int                 // (partition, sender) to fetch
	reused := 0
	for i := range ppw {
		p := self*ppw + i
		if staged[p] {
			em.merged(p)
			w.track.done.Add(int64(nw - 1))
			m.removeLeftPieces(p) // its predecessor may have died before removing them
			continue
		}
		for k := range nw - 1 {
			s := (self + 1 + k) % nw
			if m.dir.hasPiece(p, s) {
				reused++
				w.track.done.Add(1)
				continue
			}
			left[i].Add(1)
			todo = append(todo, [2]int{p, s})
		}
	}
	if reused+len(staged) > 0 {
		w.cfg.Logger.Info("reusing what the previous process of this worker did in this job",
			"partitions_merged", len(staged), "pieces_received", reused, "pieces_to_fetch", len(todo))
	}
	mergeEarly := func(p int) {
		em.start(p, func(ctx context.Context) error {
			return m.partition(ctx, p, func(n int64) { em.bytes.Add(n); w.metrics.written(n) })
		})
	}
	for i := range ppw {
		if p := self*ppw + i; !staged[p] && left[i].Load() == 0 {
			mergeEarly(p) // every piece was kept
		}
	}
	var fetched atomic.Int64
	err := par.Do(ctx, len(todo), w.cfg.FetchParallel, func(ctx context.Context, i int) error {
		p, s := todo[i][0], todo[i][1]
		if err := f.fetch(ctx, s, p); err != nil {
			return err
		}
		w.track.done.Add(1)
		if fetched.Add(1) == 1 {
			w.fault(ctx, "shuffle-piece")
		}
		if left[p-self*ppw].Add(-1) == 0 {
			mergeEarly(p)
		}
		return nil
	})
	if err != nil {
		em.stop()
		return em, err
	}
	w.cfg.Logger.Info("shuffle complete", "pieces_fetched", fetched.Load(), "pieces_reused", reused)
	return em, nil
}

// earlyMerges runs the merges of partitions completed during the shuffle,
// at most limit at once; the merge phase waits for them (wait) and merges
// only the partitions they did not.
type earlyMerges struct {
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup
	bytes  atomic.Int64 // output bytes written, for Merging's progress

	mu   sync.Mutex
	done map[int]bool // partitions merged
	err  error        // the first failure
}

func newEarlyMerges(ctx context.Context, limit int) *earlyMerges {
	ctx, cancel := context.WithCancel(ctx)
	return &earlyMerges{ctx: ctx, cancel: cancel, sem: make(chan struct{}, max(limit, 1)), done: map[int]bool{}}
}

// start merges partition p in the background.
func (e *earlyMerges) start(p int, merge func(context.Context) error) {
	e.wg.Go(func() {
		select {
		case e.sem <- struct{}{}:
			defer func() { <-e.sem }()
		case <-e.ctx.Done():
			return
		}
		err := merge(e.ctx)
		e.mu.Lock()
		defer e.mu.Unlock()
		if err == nil {
			e.done[p] = true
		} else if e.err == nil {
			e.err = err
		}
	})
}

// merged records partition p as merged already (by a predecessor).
func (e *earlyMerges) merged(p int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.done[p] = true
}

// wait waits for the merges started and returns the partitions merged and
// the first error.
func (e *earlyMerges) wait() (map[int]bool, error) {
	e.wg.Wait()
	e.cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done, e.err
}

// stop cancels the merges and waits for them (safe twice).
func (e *earlyMerges) stop() {
	e.cancel()
	e.wg.Wait()
}
