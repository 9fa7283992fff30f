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

// merge merges, for each of this worker's partitions in parallel, the
// pieces from all senders (in sender order, so that equal keys keep the
// global order the boundaries assume; this worker's own piece is its runs'
// slices, in run order) into partition.<n>.
func (w *Worker) merge(ctx context.Context) error {
	w.mu.Lock()
	self, nw, ppw := w.index, w.numWorkers, w.ppw
	w.mu.Unlock()
	mem := w.memory().merge
	var merged atomic.Int64
	return par.Do(ctx, ppw, min(w.cores, ppw), func(ctx context.Context, i int) error {
		if err := w.mergePartition(ctx, self*ppw+i, nw, mem); err != nil {
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
func (w *Worker) mergePartition(ctx context.Context, p, nw int, mem int64) error {
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
		return extsort.Merge(ctx, extsort.Config{Memory: mem, TempDir: w.workDir, Workers: 1}, segs, f,
			func(n int64) { w.done.Add(n); w.metrics.written(n) })
	})
	if err != nil {
		return fmt.Errorf("dsort: merge partition %d: %w", p, err)
	}
	return nil
}
