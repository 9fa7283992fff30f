package fsutil

import "io"

// AlignedBlock is the size of an AlignedWriter's writes: 4 MiB, a multiple
// of the 2 MiB huge page.
const AlignedBlock = 4 << 20

// AlignedWriter passes what it is given on in writes of AlignedBlock bytes
// (the last one, at Flush, shorter), so that in a file written from its
// start every write lands at a multiple of AlignedBlock. Where the file
// system caches files in large folios (Linux: ext4, xfs), such writes leave
// the file in the page cache as 2 MiB folios, and a later mapping of it (a
// sort's mapped input) is then mapped with huge pages: one TLB entry for
// 2 MiB instead of 512. Writes of other sizes leave smaller folios, which a
// mapping maps page by page; random reads of such a mapping (a sort's
// gather) cost about twice as much (docs/BENCHMARKS.md). Large folios
// need a kernel that has them for the file system (ext4 since Linux 6.16,
// xfs since 5.18); elsewhere the writes cost the same as any others.
//
// The alignment holds only if nothing between it and the file cuts the
// writes again: WriteAtomic's bufio.Writer passes writes at least its
// size straight through, so an AlignedWriter over it keeps its blocks.
//
// After a failed write every later Write and Flush returns that error:
// the bytes of the failed block are lost, and what follows would land at
// the wrong offset.
type AlignedWriter struct {
	w   io.Writer
	buf []byte
	err error // the first write error, sticky
}

// NewAlignedWriter returns an AlignedWriter writing to w.
func NewAlignedWriter(w io.Writer) *AlignedWriter {
	return &AlignedWriter{w: w, buf: make([]byte, 0, AlignedBlock)}
}

func (a *AlignedWriter) Write(p []byte) (int, error) {
	if a.err != nil {
		return 0, a.err
	}
	n := 0
	for len(p) > 0 {
		k := copy(a.buf[len(a.buf):cap(a.buf)], p)
		a.buf = a.buf[:len(a.buf)+k]
		p, n = p[k:], n+k
		if len(a.buf) == cap(a.buf) {
			if err := a.Flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Flush writes what is buffered.
func (a *AlignedWriter) Flush() error {
	if a.err != nil || len(a.buf) == 0 {
		return a.err
	}
	if _, err := a.w.Write(a.buf); err != nil {
		a.err = err
	}
	a.buf = a.buf[:0]
	return a.err
}
