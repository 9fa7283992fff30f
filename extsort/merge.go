package extsort

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/gantryhq/gantry/internal/par"
)

// source is a sorted byte range to merge: a segment of a file read through
// ra, or of a run held in memory (mem, read in place).
type source struct {
	name        string
	ra          io.ReaderAt
	mem         []byte
	off, length int64
}

// cursor reads one sorted source record by record through a buffer (or,
// for an in-memory run, straight from the run).
//
// Invariant: unless done, buf[pos:pos+recSize] is the current record and
// (hi, lo) is its key.
type cursor struct {
	ra       io.ReaderAt
	path     string
	off, end int64 // next byte of the source to read, and its end
	buf      []byte
	pos, lim int
	hi       uint64
	lo       uint16
	done     bool
}

func (c *cursor) load() {
	r := c.buf[c.pos : c.pos+keySize]
	c.hi = binary.BigEndian.Uint64(r)
	c.lo = binary.BigEndian.Uint16(r[8:])
}

// next advances to the following record, refilling the buffer when needed.
func (c *cursor) next() error {
	c.pos += recSize
	if c.pos < c.lim {
		c.load()
		return nil
	}
	return c.refill()
}

func (c *cursor) refill() error {
	if c.off >= c.end {
		c.done = true
		return nil
	}
	n := int(min(int64(len(c.buf)), c.end-c.off))
	if _, err := c.ra.ReadAt(c.buf[:n], c.off); err != nil {
		return fmt.Errorf("extsort: merge: read %s at %d: %w", c.path, c.off, err)
	}
	c.off += int64(n)
	c.pos, c.lim = 0, n
	c.load()
	return nil
}

// loserTree picks the smallest current record among k cursors in log2(k)
// comparisons per record. Ties go to the lower cursor index, which makes the
// merge stable when segments are given in input order.
//
// Layout: the leaves are the cursors, at implicit positions k..2k-1; node n
// has children 2n and 2n+1; nodes[n] (1 <= n < k) holds the loser of the
// match at n, and nodes[0] the overall winner.
type loserTree struct {
	cur   []*cursor
	nodes []int
}

// less orders cursors by (key, index); exhausted cursors sort last.
func (t *loserTree) less(a, b int) bool {
	ca, cb := t.cur[a], t.cur[b]
	switch {
	case ca.done:
		return false
	case cb.done:
		return true
	case ca.hi != cb.hi:
		return ca.hi < cb.hi
	case ca.lo != cb.lo:
		return ca.lo < cb.lo
	}
	return a < b
}

func newLoserTree(cur []*cursor) *loserTree {
	k := len(cur)
	t := &loserTree{cur: cur, nodes: make([]int, k)}
	winners := make([]int, 2*k)
	for i := 0; i < k; i++ {
		winners[k+i] = i
	}
	for n := k - 1; n >= 1; n-- {
		a, b := winners[2*n], winners[2*n+1]
		if t.less(a, b) {
			winners[n], t.nodes[n] = a, b
		} else {
			winners[n], t.nodes[n] = b, a
		}
	}
	t.nodes[0] = winners[1]
	return t
}

// fix replays the matches on the path of the winner after it advanced.
func (t *loserTree) fix() {
	w := t.nodes[0]
	for n := (w + len(t.cur)) / 2; n >= 1; n /= 2 {
		if t.less(t.nodes[n], w) {
			t.nodes[n], w = w, t.nodes[n]
		}
	}
	t.nodes[0] = w
}

const (
	minMergeBuf = 64 << 10
	maxMergeBuf = 4 << 20
	mergeOutBuf = 1 << 20
)

// mergeBufSize splits a memory budget over k input buffers.
func mergeBufSize(memory int64, k int) int {
	b := (memory - mergeOutBuf) / int64(k)
	b = max(minMergeBuf, min(b, maxMergeBuf))
	return int(b - b%recSize)
}

// Merge k-way merges sorted segments with a loser tree and writes the
// records to w. Ties go to the earlier segment, so the merge is stable when
// segments are given in input order. Buffers stay within cfg.Memory; when
// there are more segments than the budget can buffer, consecutive groups of
// them are first merged into temporary files under cfg.TempDir, round after
// round. progress, if set, receives bytes written.
func Merge(ctx context.Context, cfg Config, segs []Segment, w io.Writer, progress func(int64)) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if progress == nil {
		progress = func(int64) {}
	}
	segs, cleanup, err := reduceSegments(ctx, cfg.Memory, 1, segs, cfg.TempDir, false)
	defer cleanup()
	if err != nil {
		return err
	}
	return mergeSegments(ctx, cfg.Memory, segs, w, progress, nil)
}

// fanIn is how many file segments one merge can buffer within memory.
func fanIn(memory int64) int {
	return int(max(2, (memory-mergeOutBuf)/minMergeBuf))
}

// reduceSegments merges consecutive groups of segments into temporary files
// in dir until no more remain than one merge of memory bytes can buffer;
// each round reads and writes the data once, and keeping the groups in
// order keeps the merge stable. Groups are merged by up to workers
// goroutines, each within memory. With consume set, the input segments are
// files this package owns and are removed as soon as they are merged.
// cleanup removes the temporary files.
func reduceSegments(ctx context.Context, memory int64, workers int, segs []Segment, dir string, consume bool) ([]Segment, func(), error) {
	var temps []string
	cleanup := func() {
		for _, p := range temps {
			os.Remove(p)
		}
	}
	f := fanIn(memory)
	for len(segs) > f {
		groups := (len(segs) + f - 1) / f
		next := make([]Segment, groups)
		err := par.Do(ctx, groups, workers, func(ctx context.Context, g int) error {
			out, err := os.CreateTemp(dir, "gantry-merge-pass-*")
			if err != nil {
				return fmt.Errorf("extsort: merge: %w", err)
			}
			var n int64
			err = mergeSegments(ctx, memory, segs[g*f:min((g+1)*f, len(segs))], out, func(b int64) { n += b }, nil)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			next[g] = Segment{Path: out.Name(), Length: n}
			return err
		})
		for _, s := range next {
			if s.Path != "" {
				temps = append(temps, s.Path)
			}
		}
		if err != nil {
			return nil, cleanup, err
		}
		if consume {
			for _, s := range segs {
				os.Remove(s.Path)
			}
		}
		consume = true // from the second round on, the inputs are our temps
		segs = next
	}
	return segs, cleanup, nil
}

// mergeSegments opens the segments' files (or reads their Readers, or maps
// them) and merges them.
func mergeSegments(ctx context.Context, memory int64, segs []Segment, w io.Writer, progress func(int64), a *arena) error {
	files := map[string]*os.File{}
	var unmaps []func()
	defer func() {
		for _, f := range files {
			f.Close()
		}
		for _, u := range unmaps {
			u()
		}
	}()
	srcs := make([]source, 0, len(segs))
	for _, s := range segs {
		if s.Length%recSize != 0 || s.Offset%recSize != 0 || s.Offset < 0 || s.Length < 0 {
			return fmt.Errorf("extsort: merge: segment %s [%d,+%d) is not whole records", s.Path, s.Offset, s.Length)
		}
		if s.Reader != nil {
			srcs = append(srcs, source{name: s.Path, ra: s.Reader, off: s.Offset, length: s.Length})
			continue
		}
		if s.Map && s.Length > 0 {
			mem, unmap, err := mapSegment(s)
			if err != nil {
				return fmt.Errorf("extsort: merge: %w", err)
			}
			if mem != nil {
				unmaps = append(unmaps, unmap)
				srcs = append(srcs, source{name: s.Path, mem: mem, off: 0, length: s.Length})
				continue
			}
		}
		f := files[s.Path]
		if f == nil {
			var err error
			if f, err = os.Open(s.Path); err != nil {
				return fmt.Errorf("extsort: merge: %w", err)
			}
			files[s.Path] = f
		}
		srcs = append(srcs, source{name: s.Path, ra: f, off: s.Offset, length: s.Length})
	}
	return mergeSources(ctx, memory, srcs, w, progress, a)
}

// arena holds one merge worker's buffers, reused for every range it
// merges instead of being left to the garbage collector each time.
type arena struct {
	buf  []byte
	free func()
}

func newArena(n int64) *arena {
	b, free := bigAlloc(int(n))
	return &arena{buf: b, free: free}
}

// carve returns a buffer of n bytes from a (from offset *used on), or a new
// one when a is nil or full.
func (a *arena) carve(used *int, n int) []byte {
	if a == nil || *used+n > len(a.buf) {
		return make([]byte, n)
	}
	b := a.buf[*used : *used+n : *used+n]
	*used += n
	return b
}

// mergeSources merges srcs into w. Each file source gets a read buffer from
// the memory budget (carved from a, if given); in-memory sources are read in
// place.
func mergeSources(ctx context.Context, memory int64, srcs []source, w io.Writer, progress func(int64), a *arena) error {
	var only []source
	for _, s := range srcs {
		if s.length > 0 {
			only = append(only, s)
		}
	}
	if len(only) == 0 {
		return nil
	}
	if a == nil {
		// Buffers of their own, mapped outside the Go heap and unmapped on
		// return: a merge's buffers are gone the moment it ends instead of
		// lingering as garbage until the next collection, and the next merge
		// does not find the heap grown by them.
		a = newArena(arenaSize(memory, only))
		defer a.free()
	}
	if len(only) == 1 {
		return copySource(ctx, only[0], w, progress, a)
	}
	used := 0
	cur, err := openCursors(memory, srcs, a, &used)
	if err != nil || len(cur) == 0 {
		return err
	}
	mo := &mergeOut{w: w, progress: progress, out: a.carve(&used, mergeOutBuf-mergeOutBuf%recSize)}
	mo.bw, _ = w.(BlockWriter)
	return mergeLoop(ctx, cur, mo)
}

// arenaSize is what mergeSources carves for srcs (non-empty): the output
// buffer and, unless there is a single source (copied), a read buffer per
// file source.
func arenaSize(memory int64, srcs []source) int64 {
	n := int64(mergeOutBuf - mergeOutBuf%recSize)
	if len(srcs) == 1 {
		return n
	}
	files := 0
	for _, s := range srcs {
		if s.mem == nil {
			files++
		}
	}
	return n + int64(files)*int64(mergeBufSize(memory, max(files, 1)))
}

// openCursors makes a cursor on each non-empty source, its first block read:
// file sources share what is left of memory after the output buffer, carved
// from a (from offset *used on).
func openCursors(memory int64, srcs []source, a *arena, used *int) ([]*cursor, error) {
	files := 0
	for _, s := range srcs {
		if s.length > 0 && s.mem == nil {
			files++
		}
	}
	bufSize := mergeBufSize(memory, max(files, 1))
	var cur []*cursor
	for _, s := range srcs {
		if s.length == 0 {
			continue
		}
		c := &cursor{ra: s.ra, path: s.name, off: s.off, end: s.off + s.length}
		if s.mem != nil {
			c.buf = s.mem[s.off:c.end]
			c.off, c.lim = c.end, len(c.buf) // the whole range is already "read"
			c.load()
		} else {
			c.buf = a.carve(used, bufSize)
			if err := c.refill(); err != nil {
				return nil, err
			}
		}
		cur = append(cur, c)
	}
	return cur, nil
}

// mergeLoop is the merge proper: it moves the smallest record of the
// cursors to mo until all are exhausted.
func mergeLoop(ctx context.Context, cur []*cursor, mo *mergeOut) error {
	t := newLoserTree(cur)
	buf, lent := mo.next()
	n := 0
	for {
		c := cur[t.nodes[0]]
		if c.done {
			break // the winner is exhausted, so all are
		}
		copy(buf[n:n+recSize], c.buf[c.pos:c.pos+recSize])
		n += recSize
		if n == len(buf) {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := mo.put(buf, lent, n); err != nil {
				return err
			}
			buf, lent = mo.next()
			n = 0
		}
		if err := c.next(); err != nil {
			return err
		}
		t.fix()
	}
	return mo.put(buf, lent, n)
}

// BlockWriter is an io.Writer that lends its own buffer: a merge then puts
// records straight into it instead of copying them there through Write.
// Block returns the free space of the current buffer (nil if none); Commit
// says that its first n bytes were filled.
type BlockWriter interface {
	io.Writer
	Block() []byte
	Commit(n int) error
}

// mergeOut is where a merge puts its records: the writer's own buffer when
// it lends one with room for a record, else out, then written with Write.
type mergeOut struct {
	w        io.Writer
	bw       BlockWriter // w, if it lends buffers
	out      []byte
	progress func(int64)
}

// next returns a buffer of whole records to fill, and whether it is lent.
func (m *mergeOut) next() ([]byte, bool) {
	if m.bw != nil {
		if b := m.bw.Block(); len(b) >= recSize {
			return b[:len(b)-len(b)%recSize], true
		}
	}
	return m.out, false
}

// put hands over the first n bytes of buf (from next).
func (m *mergeOut) put(buf []byte, lent bool, n int) error {
	if n == 0 {
		return nil
	}
	var err error
	if lent {
		err = m.bw.Commit(n)
	} else {
		_, err = m.w.Write(buf[:n])
	}
	if err != nil {
		return fmt.Errorf("extsort: merge: write: %w", err)
	}
	m.progress(int64(n))
	return nil
}

// copySource is the merge of a single source: a copy, block by block.
func copySource(ctx context.Context, s source, w io.Writer, progress func(int64), a *arena) error {
	used := 0
	mo := &mergeOut{w: w, progress: progress, out: a.carve(&used, mergeOutBuf-mergeOutBuf%recSize)}
	mo.bw, _ = w.(BlockWriter)
	for off := s.off; off < s.off+s.length; {
		if err := ctx.Err(); err != nil {
			return err
		}
		buf, lent := mo.next()
		n := int(min(int64(len(buf)), s.off+s.length-off))
		if s.mem != nil && !lent {
			buf = s.mem[off : off+int64(n)]
		} else if s.mem != nil {
			copy(buf, s.mem[off:off+int64(n)])
		} else if _, err := s.ra.ReadAt(buf[:n], off); err != nil {
			return fmt.Errorf("extsort: merge: read %s at %d: %w", s.name, off, err)
		}
		if err := mo.put(buf, lent, n); err != nil {
			return err
		}
		off += int64(n)
	}
	return nil
}
