package dsort

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/gantryhq/gantry/extsort"
)

// merge merges, for each of this worker's partitions in parallel, the
// pieces from all senders (in sender order, so that equal keys keep the
// global order the boundaries assume; this worker's own piece is its runs'
// slices, in run order) into partition.<n>.
func (w *Worker) merge(ctx context.Context) error {
	w.mu.Lock()
	self, nw, ppw := w.index, w.numWorkers, w.ppw
	w.mu.Unlock()
	par := min(w.cores, ppw)
	mem := w.memory().merge
	parts := make(chan int)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	var merged atomic.Int64
	for range par {
		wg.Go(func() {
			for p := range parts {
				if err := w.mergePartition(ctx, p, nw, mem); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					continue
				}
				if merged.Add(1) == 1 {
					w.fault(ctx, "merge-partition")
				}
			}
		})
	}
feed:
	for p := self * ppw; p < (self+1)*ppw; p++ {
		select {
		case parts <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(parts)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

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
	final := filepath.Join(w.cfg.Output, partitionName(p))
	f, err := os.Create(filepath.Join(w.cfg.Output, "."+partitionName(p)+".tmp"))
	if err != nil {
		return fmt.Errorf("dsort: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if len(segs) > 0 {
		err = extsort.Merge(ctx, extsort.Config{Memory: mem, TempDir: w.workDir, Workers: 1}, segs, bw,
			func(n int64) { w.done.Add(n); w.metrics.written(n) })
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), final)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("dsort: merge partition %d: %w", p, err)
	}
	return nil
}
