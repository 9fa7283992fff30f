package extsort

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"
)

// inputMap is a sort's whole input laid out in one address range: on
// Linux and other unix systems the input files themselves, mapped read-only
// (mapInputs in inputmap_unix.go), elsewhere or when mapping fails a
// buffer the files were read into (readInputs).
//
// Mapping costs no memory of its own: the records are the page cache's
// pages, already resident when the input was just written or read, where
// reading them into a buffer first-touches as much fresh memory as the
// input holds. On a virtual machine whose host reclaims the guest's free
// memory, each first touch is a fault on the host too: reading 500 MB
// into fresh memory then takes seconds instead of a tenth of one.
//
// starts[i] is the offset in mem of input i's first record; starts are
// multiples of 4 and increase with i, so a record's offset divided by 4
// both fits an entry's index and orders records by input position.
type inputMap struct {
	mem    []byte
	starts []int64
	mapped bool   // mem maps files: a file shrunk under it faults
	free   func() // releases mem
}

// posUnit is the unit of an in-memory sort entry's index: a record's
// offset in inputMap.mem is 4·index.
const posUnit = 4

// readInputs reads inputs (total bytes) into one buffer.
func readInputs(ctx context.Context, inputs []Input, total int64, workers int) (*inputMap, error) {
	buf, free := bigAlloc(int(total))
	rd := &chunkReader{inputs: inputs}
	n, err := rd.fill(ctx, buf, workers)
	if err == nil && int64(n) != total {
		err = fmt.Errorf("%w: read %d bytes of input, expected %d", ErrBadInput, n, total)
	}
	if err != nil {
		free()
		return nil, err
	}
	starts := make([]int64, len(inputs))
	var off int64
	for i, in := range inputs {
		starts[i] = off
		off += in.Size
	}
	return &inputMap{mem: buf, starts: starts, free: free}, nil
}

// entries fills es (one per record) with the records' keys and their
// positions (offset/posUnit), in input order, using up to workers
// goroutines. It fails only when a mapped file shrank.
func (m *inputMap) entries(inputs []Input, es []entry, workers int) error {
	g := 0
	for i, in := range inputs {
		n := int(in.Size / recSize)
		if n == 0 {
			continue
		}
		base, out := m.starts[i], es[g:g+n]
		errs := make([]error, max(workers, 1))
		parallelChunks(n, workers, func(w, from, to int) {
			errs[w] = m.guard(func() {
				for k := from; k < to; k++ {
					off := base + int64(k)*recSize
					r := m.mem[off : off+keySize]
					out[k] = entry{
						hi: binary.BigEndian.Uint64(r),
						lo: uint64(r[8])<<56 | uint64(r[9])<<48 | uint64(off/posUnit),
					}
				}
			})
		})
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		g += n
	}
	return nil
}

// guard runs fn, which reads m.mem; when m maps files, a fault in fn (a
// file truncated while mapped) is returned as an error instead of
// crashing the process.
func (m *inputMap) guard(fn func()) (err error) {
	if !m.mapped {
		fn()
		return nil
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			err = fmt.Errorf("%w: an input file changed while being sorted (%v)", ErrBadInput, r)
		}
	}()
	fn()
	return nil
}
