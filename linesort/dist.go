package linesort

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/gantryhq/gantry/extsort"
)

// What a distributed sort (package dsort, --format lines) needs besides
// Sort: each machine sorts its inputs into runs (SortRuns), cuts them at
// the job's boundaries by full key (AppendFullKey, Searcher) and merges
// byte ranges of sorted runs (MergeSegments), its own and its peers'.

// SortRuns sorts inputs by ord into run files in dir (which must exist),
// a chunk of cfg's budget each, every run's lines in order and the runs in
// input order; it returns their paths. cfg.PartitionSize plays no part.
// On error the runs written so far stay in dir for the caller to remove.
func SortRuns(ctx context.Context, cfg Config, ord *Order, inputs []extsort.Input, dir string) ([]string, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &sorter{cfg: cfg, ord: ord, runDir: dir, out: &partWriter{}}
	if err := s.generate(ctx, inputs); err != nil {
		return nil, err
	}
	return s.runs, nil
}

// AppendFullKey appends the key that orders line among all others the way
// Compare does, last resort included: its sort key, then (unless -s) the
// whole line escaped and terminated as a text key is, complemented under
// the global -r. Two lines' full keys are equal exactly when Compare
// leaves their order to the input.
func (o *Order) AppendFullKey(dst, line []byte) []byte {
	if !o.raw {
		dst = o.AppendKey(dst, line)
		if o.stable {
			return dst
		}
	}
	from := len(dst)
	dst = appendText(dst, line, &key{})
	if o.reverse {
		for j := from; j < len(dst); j++ {
			dst[j] = ^dst[j]
		}
	}
	return dst
}

// Searcher finds lines by full key (AppendFullKey) in a file of sorted
// lines, each ended by a newline, without an index: a probe at a byte
// offset reads on to the next line start and compares that line. It keeps
// the last line it read, with its key, and the last stretch it scanned for
// a newline, so the probes of a search that land in one long line read it
// once.
type Searcher struct {
	ord  *Order
	r    io.ReaderAt
	size int64
	buf  []byte
	// Two lines read: the latest, and the longer of those before it (a
	// search's probes alternate between a long line and its neighbours).
	seen [2]seenLine
	// [nlFrom, nlAt) holds no newline and nlAt does (nlFrom > nlAt: none).
	nlFrom, nlAt int64
}

// seenLine is a line read: it starts at start (-1: none) and its newline
// is at end; key is its full key.
type seenLine struct {
	start, end int64
	line, key  []byte
}

// NewSearcher searches the size bytes of r, sorted lines by ord.
func NewSearcher(ord *Order, r io.ReaderAt, size int64) *Searcher {
	return &Searcher{ord: ord, r: r, size: size, buf: make([]byte, 4096),
		seen: [2]seenLine{{start: -1}, {start: -1}}, nlFrom: 1, nlAt: 0}
}

// Search returns the offset of the first line at or after from whose full
// key is at least key (greater than key when strict), or the size when
// there is none.
func (s *Searcher) Search(from int64, key []byte, strict bool) (int64, error) {
	// The first position pos in [from, size] whose next line start (the
	// offset of the line that holds byte pos, if pos starts it, else of the
	// one after) begins a line past key: the predicate is monotone because
	// the lines are sorted and line starts grow with pos.
	lo, hi := from, s.size
	for lo < hi {
		mid := lo + (hi-lo)/2
		start, err := s.lineAt(mid)
		if err != nil {
			return 0, err
		}
		k := s.seen[0].key
		if start < s.size && (bytes.Compare(k, key) < 0 || strict && bytes.Equal(k, key)) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return s.lineAt(lo)
}

// lineAt finds the first line starting at or after pos and makes it the
// latest line read (s.seen[0]); it returns its offset, or the size.
func (s *Searcher) lineAt(pos int64) (int64, error) {
	start := pos
	if pos > 0 {
		// A line starts at pos if the byte before it ends one.
		nl, err := s.next(pos - 1)
		if err != nil {
			return 0, err
		}
		start = nl + 1
	}
	switch {
	case start >= s.size:
		return s.size, nil
	case start == s.seen[0].start:
		return start, nil
	case start == s.seen[1].start:
		s.seen[0], s.seen[1] = s.seen[1], s.seen[0]
		return start, nil
	}
	end, err := s.next(start)
	if err != nil {
		return 0, err
	}
	// The new line takes the place (and buffers) of the shorter of the two
	// kept: reading a line again costs its length.
	if s.seen[0].end-s.seen[0].start > s.seen[1].end-s.seen[1].start {
		s.seen[0], s.seen[1] = s.seen[1], s.seen[0]
	}
	l := &s.seen[0]
	l.line = l.line[:0]
	for off := start; off < end; {
		n := int(min(int64(len(s.buf)), end-off))
		if _, err := s.r.ReadAt(s.buf[:n], off); err != nil {
			return 0, err
		}
		l.line = append(l.line, s.buf[:n]...)
		off += int64(n)
	}
	l.start, l.end = start, end
	l.key = s.ord.AppendFullKey(l.key[:0], l.line)
	return start, nil
}

// next returns the offset of the first newline at or after pos; a file
// whose last line lacks one is corrupt.
func (s *Searcher) next(pos int64) (int64, error) {
	for _, l := range s.seen {
		if l.start >= 0 && pos >= l.start && pos <= l.end {
			return l.end, nil
		}
	}
	if pos >= s.nlFrom && pos <= s.nlAt {
		return s.nlAt, nil
	}
	for off := pos; off < s.size; {
		if off == s.nlFrom && s.nlFrom <= s.nlAt { // the rest of the stretch is known
			s.nlFrom = pos
			return s.nlAt, nil
		}
		n := int(min(int64(len(s.buf)), s.size-off))
		if s.nlFrom > off && s.nlFrom <= s.nlAt {
			n = int(min(int64(n), s.nlFrom-off))
		}
		if _, err := s.r.ReadAt(s.buf[:n], off); err != nil {
			return 0, err
		}
		if i := bytes.IndexByte(s.buf[:n], '\n'); i >= 0 {
			s.nlFrom, s.nlAt = pos, off+int64(i)
			return s.nlAt, nil
		}
		off += int64(n)
	}
	return 0, fmt.Errorf("linesort: sorted run of %d bytes does not end with a newline", s.size)
}

// Skip returns the offset after at most n lines from from, stopping at to
// (a line start), and how many lines it passed.
func (s *Searcher) Skip(from, to, n int64) (int64, int64, error) {
	var lines int64
	if n <= 0 {
		return from, 0, nil
	}
	for off := from; off < to; {
		k := int(min(int64(len(s.buf)), to-off))
		if _, err := s.r.ReadAt(s.buf[:k], off); err != nil {
			return 0, 0, err
		}
		b := s.buf[:k]
		for lines < n {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				break
			}
			lines++
			b = b[i+1:]
		}
		if lines == n {
			return off + int64(k-len(b)), lines, nil
		}
		off += int64(k) // the rest holds no newline: part of a line
	}
	return to, lines, nil
}

// MergeSegments merges segs, each a byte range of whole sorted lines (a
// file's range, or the range of Reader), into w, stable: equal lines come
// in segment order. memory bounds the read buffers (at least 4 KiB each,
// at most 1 MiB); progress, if set, receives the bytes written.
func MergeSegments(ctx context.Context, ord *Order, memory int64, segs []extsort.Segment, w io.Writer, progress func(int64)) error {
	buf := int(max(4096, min(runBuf, memory/2/int64(max(len(segs), 1)))))
	cur := make([]cursor, 0, len(segs))
	defer func() {
		for _, c := range cur {
			c.(*runCursor).Close()
		}
	}()
	for _, sg := range segs {
		c, err := openSegment(ord, sg, buf)
		if err != nil {
			return err
		}
		cur = append(cur, c)
	}
	m, err := newMerger(ord, cur)
	if err != nil {
		return err
	}
	out := &lineWriter{w: bufio.NewWriterSize(w, buf)}
	n, reported := 0, int64(0)
	err = m.each(func(line []byte) error {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if progress != nil {
				progress(out.n - reported)
				reported = out.n
			}
		}
		return out.put(line)
	})
	if err == nil {
		err = out.w.Flush()
	}
	if err == nil && progress != nil {
		progress(out.n - reported)
	}
	return err
}

// openSegment opens a cursor on segment sg.
func openSegment(ord *Order, sg extsort.Segment, bufSize int) (*runCursor, error) {
	ra := sg.Reader
	var f *os.File
	if ra == nil {
		var err error
		if f, err = os.Open(sg.Path); err != nil {
			return nil, fmt.Errorf("linesort: run: %w", err)
		}
		ra = f
	}
	c := &runCursor{ord: ord, f: f, name: sg.Path, r: bufio.NewReaderSize(io.NewSectionReader(ra, sg.Offset, sg.Length), bufSize)}
	return c, nil
}
