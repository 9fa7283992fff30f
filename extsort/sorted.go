package extsort

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// Sorted is a whole input sorted in memory and left where it was read:
// the records stay in input order in the chunk buffer, and the sorted
// entries say in which order to read them. ReadAt gathers the records in
// sorted order on demand, so a caller that reads the sorted data once (a
// merge, a network send) pays for one gather and nothing else: no run is
// written to disk, read back or copied into a second buffer.
//
// It is what dsort keeps instead of a spilled run when a worker's input
// fits its budget. ReadAt is safe for concurrent use; Free releases the
// memory, after which nothing may read it.
type Sorted struct {
	buf   []byte  // the records, in input order
	order []entry // sorted; order[i].index() is the i-th record's position in buf
	n     int64   // records

	mu   sync.Mutex
	free func()
}

// SortedCost is the memory Sorted holds for records records: the records
// and one entry each.
func SortedCost(records int64) int64 { return records * (recSize + entrySize) }

const entrySize = entryOverhead / 2

// SortInMemory reads inputs (whole records) into one buffer and sorts them
// stably, as GenerateRuns does for one chunk; the budget must hold the
// whole input (FitsOneChunk). While sorting it also holds a scratch array
// of one entry per record, which it frees before returning. progress, if
// set, receives bytes read.
func SortInMemory(ctx context.Context, cfg Config, inputs []Input, progress func(int64)) (*Sorted, error) {
	cfg, total, err := prepareSort(cfg, inputs)
	if err != nil {
		return nil, err
	}
	recs := total / recSize
	if recs > cfg.chunkRecords() {
		return nil, fmt.Errorf("%w: %d records do not fit one in-memory chunk of %d", ErrConfig, recs, cfg.chunkRecords())
	}
	if recs == 0 {
		return &Sorted{free: func() {}}, nil
	}
	buf, freeBuf := bigAlloc(int(recs * recSize))
	es, freeEs := bigEntries(int(recs))
	tmp, freeTmp := bigEntries(int(recs))
	rd := &chunkReader{inputs: inputs}
	n, err := rd.fill(ctx, buf, cfg.Workers)
	if err == nil && int64(n) != recs*recSize {
		err = fmt.Errorf("%w: read %d bytes of input, expected %d", ErrBadInput, n, recs*recSize)
	}
	if err != nil {
		freeBuf()
		freeEs()
		freeTmp()
		return nil, err
	}
	if progress != nil {
		progress(int64(n))
	}
	makeEntries(buf, es, cfg.Workers)
	order := sortEntries(es, tmp, cfg.Workers)
	keep := freeEs
	if &order[0] == &es[0] {
		freeTmp()
	} else {
		freeEs()
		keep = freeTmp
	}
	return &Sorted{buf: buf, order: order, n: recs, free: func() { freeBuf(); keep() }}, nil
}

// FitsOneChunk reports whether SortInMemory can sort records records
// within cfg's budget.
func FitsOneChunk(cfg Config, records int64) bool {
	cfg, err := cfg.withDefaults()
	return err == nil && cfg.checkSortMemory() == nil && records <= cfg.chunkRecords()
}

// Records is the number of records held.
func (s *Sorted) Records() int64 { return s.n }

// ReadAt reads len(p) bytes of the sorted data starting at byte off. Any
// offset and length are allowed; reads of whole records at record
// boundaries take the fast path.
func (s *Sorted) ReadAt(p []byte, off int64) (int, error) {
	size := s.n * recSize
	if off < 0 {
		return 0, fmt.Errorf("extsort: negative offset %d", off)
	}
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > size-off {
		p = p[:size-off]
	}
	n := 0
	i := off / recSize
	if skip := int(off % recSize); skip != 0 {
		j := s.order[i].index() * recSize
		n = copy(p, s.buf[j+skip:j+recSize])
		i++
	}
	// Whole records, four at a time where possible: the loads of the
	// next records' positions do not wait on the copies.
	for ; n+4*recSize <= len(p); i += 4 {
		o := s.order[i : i+4 : i+4]
		j0, j1, j2, j3 := o[0].index()*recSize, o[1].index()*recSize, o[2].index()*recSize, o[3].index()*recSize
		copy(p[n:n+recSize], s.buf[j0:j0+recSize])
		copy(p[n+recSize:n+2*recSize], s.buf[j1:j1+recSize])
		copy(p[n+2*recSize:n+3*recSize], s.buf[j2:j2+recSize])
		copy(p[n+3*recSize:n+4*recSize], s.buf[j3:j3+recSize])
		n += 4 * recSize
	}
	for ; n < len(p); i++ {
		j := s.order[i].index() * recSize
		n += copy(p[n:], s.buf[j:j+recSize])
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// Free releases the memory; later calls do nothing.
func (s *Sorted) Free() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free != nil {
		s.free()
		s.free = nil
	}
	s.buf, s.order = nil, nil
}
