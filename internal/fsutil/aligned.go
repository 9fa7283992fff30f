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
// gather) cost about twice as much (docs/BENCHMARKS.md).
type AlignedWriter struct {
	w   io.Writer
	buf []byte
}

// NewAlignedWriter returns an AlignedWriter writing to w.
func NewAlignedWriter(w io.Writer) *AlignedWriter {
	return &AlignedWriter{w: w, buf: make([]byte, 0, AlignedBlock)}
}

func (a *AlignedWriter) Write(p []byte) (int, error) {
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
	if len(a.buf) == 0 {
		return nil
	}
	_, err := a.w.Write(a.buf)
	a.buf = a.buf[:0]
	return err
}
