package extsort

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gantryhq/gantry/internal/par"
)

// Run is a sorted file of whole records, spilled by GenerateRuns, or a
// sorted input held in memory (Reader set, e.g. a *Sorted; Path is then
// only its name).
type Run struct {
	Path    string
	Records int64
	Reader  io.ReaderAt

	// data is the run itself when Sort keeps runs in memory (Path is then
	// only a label); free unmaps it.
	data []byte
	free func()
}

// memRun is an in-memory run being written by the parallel gather.
type memRun []byte

func (m memRun) WriteAt(p []byte, off int64) (int, error) { return copy(m[off:], p), nil }

// Segment is a byte range of a sorted file, or of Reader when it is set
// (Path is then only its name); Offset and Length are multiples of the
// record size.
//
// Map asks a merge to map the file and read the records in place instead
// of copying them into a buffer first: no buffer, no copy, but the file's
// pages count in the process's resident memory while the merge runs. Use
// it for files the page cache holds anyway (just written). Where the
// system does not map files, the file is read through a buffer.
type Segment struct {
	Path           string
	Offset, Length int64
	Reader         io.ReaderAt
	Map            bool
}

// Segment returns the whole run as a segment.
func (r Run) Segment() Segment {
	return Segment{Path: r.Path, Length: r.Records * recSize, Reader: r.Reader}
}

// readPieceSize bounds one ReadAt, so a chunk is read by all workers at once
// even when it comes from a single large file.
const readPieceSize = 4 << 20

// chunkReader hands out the input records in order, one chunk at a time.
type chunkReader struct {
	inputs []Input
	file   int   // index of the input holding the next record
	off    int64 // offset of the next record in inputs[file]
}

type readPiece struct {
	path         string
	fileOff, dst int64
	n            int
}

// fill reads the next records into buf (whose length is a multiple of
// recSize), in parallel, and returns how many bytes it read; 0 at the end.
func (r *chunkReader) fill(ctx context.Context, buf []byte, workers int) (int, error) {
	var pieces []readPiece
	n := 0
	for n < len(buf) && r.file < len(r.inputs) {
		in := r.inputs[r.file]
		if r.off >= in.Size {
			r.file++
			r.off = 0
			continue
		}
		k := int(min(int64(len(buf)-n), in.Size-r.off, readPieceSize))
		pieces = append(pieces, readPiece{path: in.Path, fileOff: r.off, dst: int64(n), n: k})
		r.off += int64(k)
		n += k
	}
	err := par.Do(ctx, len(pieces), workers, func(_ context.Context, i int) error {
		return readAt(pieces[i], buf)
	})
	if err != nil {
		return 0, err
	}
	return n, ctx.Err()
}

func readAt(p readPiece, buf []byte) error {
	f, err := os.Open(p.path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	defer f.Close()
	if _, err := f.ReadAt(buf[p.dst:p.dst+int64(p.n)], p.fileOff); err != nil {
		if err == io.EOF {
			return fmt.Errorf("%w: %s shrank while being read (wanted %d bytes at offset %d)", ErrBadInput, p.path, p.n, p.fileOff)
		}
		return fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	return nil
}

// sorter owns the reusable buffers of run generation. Call free when done.
type sorter struct {
	cfg    Config
	buf    []byte  // one chunk of records
	es, t  []entry // sort entries and scratch, one per record of buf
	gather [][]byte

	readSort, spill time.Duration // time spent in each phase so far
	free            func()
}

// newSorter allocates buffers for chunks of up to chunkRecs records.
func newSorter(cfg Config, chunkRecs int64) *sorter {
	recs := chunkRecs
	buf, f1 := bigAlloc(int(recs * recSize))
	es, f2 := bigEntries(int(recs))
	t, f3 := bigEntries(int(recs))
	frees := []func(){f1, f2, f3}
	s := &sorter{cfg: cfg, buf: buf, es: es, t: t}
	s.gather = make([][]byte, cfg.Workers)
	for i := range s.gather {
		var f func()
		s.gather[i], f = bigAlloc(int(cfg.gather))
		frees = append(frees, f)
	}
	s.free = func() {
		for _, f := range frees {
			f()
		}
	}
	return s
}

// sortChunk sorts the first n bytes of s.buf and returns the sorted entries.
func (s *sorter) sortChunk(n int) []entry {
	recs := n / recSize
	makeEntries(s.buf[:n], s.es[:recs], s.cfg.Workers)
	return sortEntries(s.es[:recs], s.t[:recs], s.cfg.Workers)
}

// writeSorted writes the records of s.buf in the order of sorted to w,
// starting at offset base, with every worker gathering a contiguous share.
func (s *sorter) writeSorted(ctx context.Context, sorted []entry, w io.WriterAt, base int64, phase Phase) error {
	errs := make([]error, s.cfg.Workers)
	parallelChunks(len(sorted), s.cfg.Workers, func(wk, from, to int) {
		g := s.gather[wk]
		off := base + int64(from)*recSize
		for from < to {
			if ctx.Err() != nil {
				errs[wk] = ctx.Err()
				return
			}
			k := min(to-from, len(g)/recSize)
			for i, e := range sorted[from : from+k] {
				j := e.index() * recSize
				copy(g[i*recSize:(i+1)*recSize], s.buf[j:j+recSize])
			}
			if _, err := w.WriteAt(g[:k*recSize], off); err != nil {
				errs[wk] = err
				return
			}
			s.cfg.Progress(phase, int64(k)*recSize)
			off += int64(k) * recSize
			from += k
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// GenerateRuns reads inputs in order, one chunk of the memory budget at a
// time, sorts each chunk stably and spills it into dir as a sorted run. Runs
// come back in input order, so merging them with ties broken by run order is
// a stable sort of the whole input. On error the runs written so far are
// removed. progress, if set, receives bytes read.
func GenerateRuns(ctx context.Context, cfg Config, inputs []Input, dir string, progress func(int64)) ([]Run, error) {
	cfg, total, err := prepareSort(cfg, inputs)
	if err != nil {
		return nil, err
	}
	if total == 0 {
		return nil, nil
	}
	user := cfg.Progress
	cfg.Progress = func(p Phase, n int64) {
		user(p, n)
		if progress != nil && p == PhaseRead {
			progress(n)
		}
	}
	s := newSorter(cfg, min(cfg.chunkRecords(), total/recSize))
	defer s.free()
	runs, err := s.generateRuns(ctx, inputs, dir)
	if err != nil {
		for _, r := range runs {
			os.Remove(r.Path)
		}
		return nil, err
	}
	return runs, nil
}

// prepareSort fills in cfg's defaults, checks that its budget can sort,
// and returns it with the inputs' total size in bytes.
func prepareSort(cfg Config, inputs []Input) (Config, int64, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return cfg, 0, err
	}
	if err := cfg.checkSortMemory(); err != nil {
		return cfg, 0, err
	}
	var total int64
	for _, in := range inputs {
		total += in.Size
	}
	return cfg, total, nil
}

// generateRuns spills sorted runs into dir, or keeps them in memory if dir
// is "" (then the caller must free each run).
func (s *sorter) generateRuns(ctx context.Context, inputs []Input, dir string) ([]Run, error) {
	rd := &chunkReader{inputs: inputs}
	var runs []Run
	for {
		t0 := time.Now()
		n, err := rd.fill(ctx, s.buf, s.cfg.Workers)
		if err != nil {
			return runs, err
		}
		if n == 0 {
			return runs, nil
		}
		s.cfg.Progress(PhaseRead, int64(n))
		sorted := s.sortChunk(n)
		t1 := time.Now()
		s.readSort += t1.Sub(t0)
		if dir == "" {
			data, free := bigAlloc(n)
			runs = append(runs, Run{Path: fmt.Sprintf("memory-run-%d", len(runs)), Records: int64(len(sorted)), data: data, free: free})
			if err := s.writeSorted(ctx, sorted, memRun(data), 0, PhaseSpill); err != nil {
				return runs, err
			}
			s.readSort += time.Since(t1) // in memory, the gather is part of sorting
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("run-%06d", len(runs)))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return runs, fmt.Errorf("extsort: spill: %w", err)
		}
		runs = append(runs, Run{Path: path, Records: int64(len(sorted))})
		err = s.writeSorted(ctx, sorted, f, 0, PhaseSpill)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		s.spill += time.Since(t1)
		if err != nil {
			return runs, fmt.Errorf("extsort: spill %s: %w", path, err)
		}
		s.cfg.Logger.Debug("spilled run", "path", path, "records", len(sorted))
	}
}
