package dsort

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/internal/par"
)

// merger writes this worker's partitions. Partition p's output is the
// pieces from all senders merged in sender order, so that equal keys keep
// the global order the boundaries assume; this worker's own piece is its
// runs' slices (own), in run order, and the others are the committed pieces
// under dir. Each is written to its staged name in out, atomically.
type merger struct {
	format recordFormat
	layout jobLayout
	own    *sortedInput
	dir    *workDir // received pieces; extsort's scratch space
	out    output
	job    string // names the staged files
	memory int64  // each partition's merge (memoryPlan.merge)
	// mapPieces: the merge maps the received pieces (just written, in the
	// page cache) and reads them in place, instead of copying them into
	// read buffers; their pages count in the process's RSS while it runs,
	// so only the in-memory plan (memoryPlan.keep) does so.
	mapPieces bool

	// inherited are the partitions a predecessor of this process staged
	// in this job (set by the shuffle, before any merge): not merged again.
	inherited map[int]bool

	// staged, when set, is called with each partition once it is staged
	// (an S3 output starts its upload).
	staged func(p int)

	mu      sync.Mutex // protects removed and the removal of pieces
	removed int64      // bytes of the pieces removed once merged
}

// removeLeftPieces removes the pieces of partition p that a predecessor
// staged but died before it removed them.
func (m *merger) removeLeftPieces(p int) {
	for s := range m.layout.workers {
		os.Remove(m.dir.piecePath(p, s))
	}
}

// partition merges partition p's pieces into its staged partition file,
// written atomically: the file appears complete or not at all. progress
// receives the bytes written.
func (m *merger) partition(ctx context.Context, p int, progress func(int64)) error {
	var segs, pieces []extsort.Segment
	for s := range m.layout.workers {
		if s == m.layout.self {
			segs = append(segs, m.own.segments(p)...)
			continue
		}
		path := m.dir.piecePath(p, s)
		info, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("dsort: merge partition %d: %w", p, err)
		}
		if info.Size() > 0 {
			segs = append(segs, extsort.Segment{Path: path, Length: info.Size(), Map: m.mapPieces})
			pieces = append(pieces, segs[len(segs)-1])
		}
	}
	// Staged under a hidden name: it becomes partition.<p> only when the
	// master has committed the job (output.commit).
	// The output is written past the page cache (WriteAtomicDirect): it
	// is not read again by this job, and must reach the disk anyway.
	write := fsutil.WriteAtomicDirect
	if m.out.remote != nil {
		write = fsutil.WriteAtomic // read again at once, by the upload: through the page cache
	}
	err := write(m.out.stagedPath(m.job, p), 0o644, func(f io.Writer) error {
		if len(segs) == 0 {
			return nil
		}
		return m.format.merge(ctx, extsort.Config{Memory: m.memory, TempDir: m.dir.path, Workers: 1}, segs, f, progress)
	})
	if err != nil {
		return fmt.Errorf("dsort: merge partition %d: %w", p, err)
	}
	m.removePieces(pieces)
	if m.staged != nil {
		m.staged(p)
	}
	return nil
}

// removePieces removes the received pieces of a partition (segs) once its
// output is staged: nothing reads them again (a restarted worker fetches anew),
// and the page cache they held is reused, warm, by the pieces still to
// come instead of more memory being first touched.
func (m *merger) removePieces(segs []extsort.Segment) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sg := range segs {
		if os.Remove(sg.Path) == nil {
			m.removed += sg.Length
		}
	}
}

// receivedBytes is the size of all the pieces received so far, those
// merged and removed included.
func (m *merger) receivedBytes() (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.dir.receivedBytes()
	return n + m.removed, err
}

// ownBytes is the size of this worker's own pieces of its partitions (read
// from its runs, not received).
func (m *merger) ownBytes() int64 {
	var n int64
	lo, hi := m.layout.own()
	for p := lo; p < hi; p++ {
		if m.inherited[p] {
			continue // not merged again
		}
		for _, sg := range m.own.segments(p) {
			n += sg.Length
		}
	}
	return n
}

// merge merges, in parallel (at most cores at once), each of this worker's
// partitions not already merged during the shuffle (skip). The fault point
// "merge-partition" is reached once the first of them is written, or at
// once when none is left.
func (w *Worker) merge(ctx context.Context, m *merger, skip map[int]bool) error {
	var todo []int
	lo, hi := m.layout.own()
	for p := lo; p < hi; p++ {
		if !skip[p] {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		w.fault(ctx, "merge-partition")
		return nil
	}
	var merged atomic.Int64
	return par.Do(ctx, len(todo), min(w.cores, len(todo)), func(ctx context.Context, i int) error {
		if err := m.partition(ctx, todo[i], func(n int64) { w.track.done.Add(n); w.metrics.written(n) }); err != nil {
			return err
		}
		if merged.Add(1) == 1 {
			w.fault(ctx, "merge-partition")
		}
		return nil
	})
}
