package dsort

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/internal/par"
)

// merge merges, for each of this worker's partitions not already merged
// during the shuffle (skip), in parallel, the pieces from all senders (in
// sender order, so that equal keys keep the global order the boundaries
// assume; this worker's own piece is its runs' slices, in run order) into
// partition.<n>. The fault point "merge-partition" is reached once the
// first of them is written, or at once when none is left.
func (w *Worker) merge(ctx context.Context, skip map[int]bool) error {
	w.mu.Lock()
	self, nw, ppw := w.index, w.numWorkers, w.ppw
	w.mu.Unlock()
	var todo []int
	for p := self * ppw; p < (self+1)*ppw; p++ {
		if !skip[p] {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		w.fault(ctx, "merge-partition")
		return nil
	}
	mem := w.memory().merge
	var merged atomic.Int64
	return par.Do(ctx, len(todo), min(w.cores, len(todo)), func(ctx context.Context, i int) error {
		if err := w.mergePartition(ctx, todo[i], nw, mem, func(n int64) { w.done.Add(n); w.metrics.written(n) }); err != nil {
			return err
		}
		if merged.Add(1) == 1 {
			w.fault(ctx, "merge-partition")
		}
		return nil
	})
}

// mergePartition merges partition p's pieces into its staged partition
// file, written atomically: the file appears complete or not at all.
// progress receives the bytes written.
func (w *Worker) mergePartition(ctx context.Context, p, nw int, mem int64, progress func(int64)) error {
	var segs []extsort.Segment
	for s := range nw {
		if s == w.index {
			segs = append(segs, w.ownSegments(p)...)
			continue
		}
		path := w.piecePath(p, s)
		info, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("dsort: merge partition %d: %w", p, err)
		}
		if info.Size() > 0 {
			segs = append(segs, extsort.Segment{Path: path, Length: info.Size()})
		}
	}
	// Staged under a hidden name: it becomes partition.<p> only when the
	// master has committed the job (commitOutput).
	// The output is written past the page cache (WriteAtomicDirect): it
	// is not read again by this job, and must reach the disk anyway.
	err := fsutil.WriteAtomicDirect(filepath.Join(w.cfg.Output, w.stagedName(p)), 0o644, func(f io.Writer) error {
		if len(segs) == 0 {
			return nil
		}
		return extsort.Merge(ctx, extsort.Config{Memory: mem, TempDir: w.workDir, Workers: 1}, segs, f, progress)
	})
	if err != nil {
		return fmt.Errorf("dsort: merge partition %d: %w", p, err)
	}
	return nil
}
