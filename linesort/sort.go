package linesort

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/record"
)

// Config controls a sort. The zero value is usable: every field documents
// its default.
type Config struct {
	// Memory is the budget in bytes: two fifths hold the lines of a chunk,
	// a fifth their entries, a fifth the bucket sort's second array of
	// them, a fifth their keys; the merge of spilled runs reads them
	// through buffers of half of it. Zero means extsort.DefaultMemory(). A
	// line longer than the chunk (Memory*2/5) is an error.
	Memory int64
	// TempDir is where runs are spilled; empty means os.TempDir().
	TempDir string
	// Workers is how many goroutines sort a chunk; zero means GOMAXPROCS.
	Workers int
	// PartitionSize: a partition file ends at the first line end at or
	// past this many bytes. Zero means 128 MiB.
	PartitionSize int64
	// Logger receives info lines; nil discards them.
	Logger *slog.Logger
	// Progress, if set, is called with each phase's increments of bytes.
	Progress func(phase extsort.Phase, bytes int64)
	// ChunkBytes is how many bytes of lines a chunk holds; zero means two
	// fifths of Memory. Smaller chunks make more, smaller runs: tests use
	// it to spill small inputs.
	ChunkBytes int

	// Tests shrink the fan-in to merge in several passes.
	testFanIn int
}

// MinMemory is the smallest budget accepted.
const MinMemory = extsort.MinMemory

func (c Config) withDefaults() (Config, error) {
	if c.Memory == 0 {
		c.Memory = extsort.DefaultMemory()
	}
	if c.Memory < MinMemory {
		return c, fmt.Errorf("%w: memory budget %d bytes is below the minimum of %d", extsort.ErrConfig, c.Memory, MinMemory)
	}
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	if c.Workers <= 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	if c.PartitionSize <= 0 {
		c.PartitionSize = 128 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = func(extsort.Phase, int64) {}
	}
	return c, nil
}

// chunkBytes is how much of the budget holds a chunk's lines (as much
// again holds their entries and keys); at most 2 GiB, so that offsets fit
// an entry's 32 bits.
func (c Config) chunkBytes() int {
	if c.ChunkBytes > 0 {
		return min(c.ChunkBytes, int(min(c.Memory*2/5, 2<<30)))
	}
	return int(min(c.Memory*2/5, 2<<30))
}

// fanIn is how many runs one merge opens: as many cursors as half the
// budget holds, each its read buffer plus, when lines are long, the
// longest line (gathered, twice over at worst) and its key.
func (c Config) fanIn(ord *Order, longest int) int {
	if c.testFanIn > 0 {
		return c.testFanIn
	}
	cursor := int64(c.ioBuf())
	if longest > c.ioBuf() {
		cursor += int64(2*longest + keyRoom(ord, longest))
	}
	return int(max(2, c.Memory/2/cursor))
}

// ioBuf is the buffer of each run or output file: runBuf, or less for a
// chunk so small that runs are tiny.
func (c Config) ioBuf() int { return max(4096, min(runBuf, c.chunkBytes()/4)) }

// Stats describes a finished sort.
type Stats struct {
	Lines      int64
	Bytes      int64 // of output: every line with its newline
	InMemory   bool  // one chunk held the whole input: nothing spilled
	Runs       int
	Partitions int
	// ReadSort covers reading and sorting chunks; Spill writing runs;
	// Merge merging them (or writing the one chunk) into the output.
	ReadSort, Spill, Merge time.Duration
}

// spillPrefix names the temp dirs a sort spills runs into.
const spillPrefix = "gantry-linesort-"

// runBuf is each run's read buffer in a merge; the merge's fan-in is what
// half the budget holds of them.
const runBuf = 1 << 20

// Sort sorts the lines of inputs (files in the order given; a file's last
// line needs no newline) by ord into partition.<n> files in outDir, which
// end at line ends: their concatenation is what `LC_ALL=C sort` with the
// same options writes. outDir is created if needed and may hold partition
// files of an earlier sort (replaced) but nothing else; nothing appears in
// it until the whole output is written, and on error or cancellation every
// partial and temporary file is removed.
func Sort(ctx context.Context, cfg Config, ord *Order, inputs []extsort.Input, outDir string) (Stats, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Stats{}, err
	}
	stage, err := extsort.StageOutput(inputs, outDir, cfg.TempDir, spillPrefix, cfg.Logger)
	if err != nil {
		return Stats{}, err
	}
	defer stage.Close()
	s := &sorter{cfg: cfg, ord: ord, out: &partWriter{dir: stage.Path(), size: cfg.PartitionSize, buf: cfg.ioBuf(), progress: cfg.Progress}}
	defer s.cleanup()
	if err := s.run(ctx, inputs); err != nil {
		return Stats{}, err
	}
	if err := s.out.close(); err != nil {
		return Stats{}, err
	}
	if _, err := stage.Commit(); err != nil {
		return Stats{}, err
	}
	s.st.Partitions = s.out.n
	s.st.Bytes = s.out.total
	return s.st, nil
}

// sorter is one Sort's state.
type sorter struct {
	cfg     Config
	ord     *Order
	out     *partWriter
	st      Stats
	spill   *fsutil.OwnedDir
	runDir  string // SortRuns: where runs go, and every chunk is one
	runs    []string
	longest int // the longest line read, for the merge's fan-in
}

func (s *sorter) cleanup() {
	s.out.abort()
	s.spill.Close()
}

// run reads the inputs a chunk at a time, sorts each, and either writes
// the only one straight to the output or spills every one as a run and
// merges the runs.
func (s *sorter) run(ctx context.Context, inputs []extsort.Input) error {
	if err := s.generate(ctx, inputs); err != nil || s.st.InMemory {
		return err
	}
	// The chunk's memory went back before the merge's buffers are taken.
	debug.FreeOSMemory()
	t := time.Now()
	defer func() { s.st.Merge += time.Since(t) }()
	return s.mergeRuns(ctx)
}

// generate reads the inputs a chunk at a time and sorts each: the only
// one is written straight to the output (Stats.InMemory) unless s.runDir
// asks for runs; otherwise every one is spilled as a run (s.runs).
func (s *sorter) generate(ctx context.Context, inputs []extsort.Input) error {
	rd := &lineReader{inputs: inputs, progress: s.cfg.Progress}
	defer rd.close()
	c := newChunk(s.ord, s.cfg, inputs)
	for {
		t := time.Now()
		more, err := c.fill(ctx, rd)
		if err != nil {
			return err
		}
		c.sort(s.cfg.Workers)
		s.st.ReadSort += time.Since(t)
		s.longest = max(s.longest, c.longest)
		s.st.Lines += int64(len(c.ents))
		if !more && s.runs == nil && s.runDir == "" {
			s.st.InMemory = true
			t = time.Now()
			err := c.write(s.out.put)
			s.st.Merge += time.Since(t)
			return err
		}
		t = time.Now()
		if err := s.spillRun(c); err != nil {
			return err
		}
		s.st.Spill += time.Since(t)
		if !more {
			return ctx.Err()
		}
	}
}

// write writes a sorted chunk's lines, in order, into put.
func (c *chunk) write(put func([]byte) error) error {
	for i := range c.ents {
		if err := put(c.line(&c.ents[i])); err != nil {
			return err
		}
	}
	return nil
}

// spillRun writes a sorted chunk as the next run file, in s.runDir if
// set, else in a temp directory of its own.
func (s *sorter) spillRun(c *chunk) error {
	dir := s.runDir
	if dir == "" && s.spill == nil {
		d, err := fsutil.CreateOwnedDir(s.cfg.TempDir, spillPrefix)
		if err != nil {
			return fmt.Errorf("linesort: temp directory: %w", err)
		}
		s.spill = d
	}
	if dir == "" {
		dir = s.spill.Path
	}
	path := filepath.Join(dir, fmt.Sprintf("run-%06d", len(s.runs)))
	err := writeFile(path, s.cfg.ioBuf(), func(lw *lineWriter) error { return c.write(lw.put) })
	if err != nil {
		return err
	}
	s.runs = append(s.runs, path)
	s.st.Runs++
	return nil
}

// writeFile creates path and fills it through a lineWriter.
func writeFile(path string, buf int, fill func(*lineWriter) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("linesort: %w", err)
	}
	lw := &lineWriter{w: bufio.NewWriterSize(f, buf)}
	err = fill(lw)
	if err == nil {
		err = lw.w.Flush()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("linesort: %s: %w", path, err)
	}
	return nil
}

// mergeRuns merges the spilled runs into the output, first merging groups
// of consecutive runs (which keeps ties in input order) while there are
// more than one merge can open at once.
func (s *sorter) mergeRuns(ctx context.Context) error {
	fanIn := s.cfg.fanIn(s.ord, s.longest)
	for pass := 0; len(s.runs) > fanIn; pass++ {
		var next []string
		for i := 0; i < len(s.runs); i += fanIn {
			group := s.runs[i:min(i+fanIn, len(s.runs))]
			path := filepath.Join(s.spill.Path, fmt.Sprintf("pass%d-%06d", pass, len(next)))
			err := writeFile(path, s.cfg.ioBuf(), func(lw *lineWriter) error { return s.merge(ctx, group, lw.put) })
			if err != nil {
				return err
			}
			for _, r := range group {
				os.Remove(r)
			}
			next = append(next, path)
		}
		s.runs = next
	}
	return s.merge(ctx, s.runs, s.out.put)
}

// merge merges the run files paths into put.
func (s *sorter) merge(ctx context.Context, paths []string, put func([]byte) error) error {
	cur := make([]cursor, 0, len(paths))
	defer func() {
		for _, c := range cur {
			c.(*runCursor).Close()
		}
	}()
	for _, p := range paths {
		c, err := openRun(s.ord, p, s.cfg.ioBuf())
		if err != nil {
			return err
		}
		cur = append(cur, c)
	}
	m, err := newMerger(s.ord, cur)
	if err != nil {
		return err
	}
	n := 0
	return m.each(func(line []byte) error {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return put(line)
	})
}

// entry is a line of a chunk as the in-memory sort moves it: pre is its
// sort key's first 8 bytes (big endian, zero padded; complemented for a
// Raw order reversed), so most comparisons never touch the bytes.
type entry struct {
	pre        uint64
	loff, llen uint32 // the line in chunk.buf, without its newline
	koff, klen uint32 // its sort key in chunk.keys (unused when Raw)
}

// chunk is the lines sorted in memory at once: buf holds whole lines
// (buf[:used]) and the start of the next chunk's (buf[used:n]).
type chunk struct {
	ord     *Order
	buf     []byte
	n, used int
	ents    []entry // at most cap(ents): never grown
	scratch []entry // the bucket sort's second array
	keys    []byte  // at most keyCap bytes
	keyCap  int
	longest int // the longest line added
}

// newChunk allocates a chunk's memory for cfg's budget, or for all of the
// inputs' lines if they take less. The arrays are allocated once, never
// grown, so a sort's heap stays what it allocated here.
func newChunk(ord *Order, cfg Config, inputs []extsort.Input) *chunk {
	total := int64(len(inputs)) // a newline a file may lack
	for _, in := range inputs {
		total += in.Size
	}
	// Room for files grown since they were listed; at least 1 byte, so
	// that reading no input ends.
	size := int(min(int64(cfg.chunkBytes()), total+1<<20))
	fifth := int(min(cfg.Memory/5, 1<<30))
	// A line takes at least 1 byte: more entries than that never fill.
	n := min(fifth/entrySize, size)
	c := &chunk{ord: ord, buf: make([]byte, size), ents: make([]entry, 0, n)}
	if cfg.Workers > 1 {
		c.scratch = make([]entry, 0, n)
	}
	if !ord.raw {
		c.keys = make([]byte, 0, min(fifth, size*(2*len(ord.keys)+6)))
		c.keyCap = cap(c.keys)
	}
	return c
}

// entrySize is an entry's size in bytes.
const entrySize = 24

// keyRoom is the most bytes a line of n bytes adds to the keys: each key
// at most escapes every byte and adds its terminator, or, as a number,
// adds its class, digit count and terminator.
func keyRoom(ord *Order, n int) int { return len(ord.keys) * (2*n + 6) }

// fits reports whether a line of n bytes still fits the chunk's entries
// and keys (the first line always does: keys grow for it if they must).
func (c *chunk) fits(n int) bool {
	if len(c.ents) == 0 {
		return true
	}
	return len(c.ents) < cap(c.ents) && len(c.keys)+keyRoom(c.ord, n) <= c.keyCap
}

func (c *chunk) line(e *entry) []byte { return c.buf[e.loff : e.loff+e.llen] }

func (c *chunk) key(e *entry) []byte {
	if c.ord.raw {
		return c.line(e)
	}
	return c.keys[e.koff : e.koff+e.klen]
}

// fill makes c the next chunk: the lines after the last chunk's, as many
// as the buffer and the entry budget hold. more is false when they are
// the input's last.
func (c *chunk) fill(ctx context.Context, rd *lineReader) (more bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	c.n = copy(c.buf, c.buf[c.used:c.n])
	c.used = 0
	c.ents, c.keys = c.ents[:0], c.keys[:0]
	m, err := rd.read(c.buf[c.n:])
	if err != nil {
		return false, err
	}
	c.n += m
	for c.used < c.n {
		nl := bytes.IndexByte(c.buf[c.used:c.n], '\n')
		if nl < 0 || !c.fits(nl) {
			break
		}
		if err := c.add(c.used, nl); err != nil {
			return false, err
		}
		c.used += nl + 1
	}
	if c.used == 0 && c.n > 0 {
		return false, fmt.Errorf("%w: a line of more than %d bytes (two fifths of the memory budget; raise --memory)", extsort.ErrBadInput, len(c.buf))
	}
	return !rd.done || c.used < c.n, nil
}

// add adds the line at buf[off:off+n] (its newline after it). Its key
// may not take more than the keys' budget (a chunk's first line is
// added whatever its key room, then checked).
func (c *chunk) add(off, n int) error {
	e := entry{loff: uint32(off), llen: uint32(n)}
	k := c.buf[off : off+n]
	if !c.ord.raw {
		from := len(c.keys)
		c.keys = c.ord.AppendKey(c.keys, k)
		if len(c.keys) > c.keyCap {
			return fmt.Errorf("%w: the keys of a line of %d bytes take %d bytes, more than a fifth of the memory budget (raise --memory)",
				extsort.ErrBadInput, n, len(c.keys)-from)
		}
		e.koff, e.klen = uint32(from), uint32(len(c.keys)-from)
		k = c.keys[from:]
	}
	e.pre = prefixOf(c.ord, k, 0)
	c.ents = append(c.ents, e)
	c.longest = max(c.longest, n)
	return nil
}

// sort sorts the chunk's entries: it cuts them into one bucket per worker
// by ranges of pre (splitters from a sample; equal pre, one bucket),
// keeping input order within each, and sorts the buckets in parallel:
// the buckets lie in c.ents in order, so c.ents is then sorted.
func (c *chunk) sort(workers int) {
	if workers <= 1 || len(c.ents) < 1024 {
		c.sortFrom(c.ents, 0)
		return
	}
	split := c.splitters(workers)
	counts := make([]int, len(split)+1)
	for i := range c.ents {
		counts[bucketOf(split, c.ents[i].pre)]++
	}
	c.scratch = c.scratch[:len(c.ents)]
	starts := make([]int, len(counts))
	for b := 1; b < len(counts); b++ {
		starts[b] = starts[b-1] + counts[b-1]
	}
	next := slices.Clone(starts)
	for _, e := range c.ents {
		b := bucketOf(split, e.pre)
		c.scratch[next[b]] = e
		next[b]++
	}
	c.ents, c.scratch = c.scratch, c.ents
	var wg sync.WaitGroup
	for b := range counts {
		wg.Go(func() { c.sortFrom(c.ents[starts[b]:starts[b]+counts[b]], 0) })
	}
	wg.Wait()
}

// splitters picks up to workers-1 distinct pre values that cut a sample
// of the entries into equal parts.
func (c *chunk) splitters(workers int) []uint64 {
	const samples = 1024
	sample := make([]uint64, 0, samples)
	step := max(1, len(c.ents)/samples)
	for i := 0; i < len(c.ents); i += step {
		sample = append(sample, c.ents[i].pre)
	}
	slices.Sort(sample)
	var split []uint64
	for w := 1; w < workers; w++ {
		v := sample[w*len(sample)/workers]
		if len(split) == 0 || v > split[len(split)-1] {
			split = append(split, v)
		}
	}
	return split
}

// bucketOf is the bucket of pre: how many splitters are at most pre.
func bucketOf(split []uint64, pre uint64) int {
	b := 0
	for b < len(split) && split[b] <= pre {
		b++
	}
	return b
}

// smallRun is the size below which entries are sorted by whole keys.
const smallRun = 16

// sortFrom sorts es, whose keys share their first depth bytes, 8 key bytes
// at a time (an MSD sort on pre): it sorts by pre, then each run of equal
// pre again by the next 8 bytes, so a line's bytes are read once per level
// instead of once per comparison. Runs of keys that end within the level,
// and small runs, are sorted with the whole comparison (keys, the last
// resort, input order).
func (c *chunk) sortFrom(es []entry, depth int) {
	if len(es) <= smallRun {
		slices.SortFunc(es, c.compare)
		return
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(a.pre, b.pre) })
	for i := 0; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].pre == es[i].pre {
			j++
		}
		if j-i > 1 {
			c.refine(es[i:j], depth+8)
		}
		i = j
	}
}

// refine sorts run, whose keys share their first depth bytes.
func (c *chunk) refine(run []entry, depth int) {
	longer := false
	for k := range run {
		if len(c.key(&run[k])) > depth {
			longer = true
			break
		}
	}
	if !longer || len(run) <= smallRun {
		slices.SortFunc(run, c.compare)
		return
	}
	for k := range run {
		run[k].pre = prefixOf(c.ord, c.key(&run[k]), depth)
	}
	c.sortFrom(run, depth)
}

// prefixOf is the 8 bytes of key from at, zero padded, as a big-endian
// number (complemented for a Raw order reversed, so that it sorts the way
// Compare does): a smaller prefix is a smaller key.
func prefixOf(ord *Order, key []byte, at int) uint64 {
	var p [8]byte
	if at < len(key) {
		copy(p[:], key[at:])
	}
	v := binary.BigEndian.Uint64(p[:])
	if ord.raw && ord.reverse {
		v = ^v
	}
	return v
}

// compare is the whole order of two entries: keys, the last resort, then
// input order.
func (c *chunk) compare(a, b entry) int {
	if r := c.ord.Compare(c.key(&a), c.line(&a), c.key(&b), c.line(&b)); r != 0 {
		return r
	}
	return cmp.Compare(a.loff, b.loff)
}

// lineReader reads the input files in order as one stream of whole lines:
// a file whose last line has no newline gets one.
type lineReader struct {
	inputs   []extsort.Input
	progress func(extsort.Phase, int64)
	i        int
	f        *os.File
	last     byte // the last byte read from f ('\n' before any)
	needNL   bool // the byte before dst's start needs a newline after it
	done     bool
}

// read fills dst from the inputs; short only at their end (done).
func (r *lineReader) read(dst []byte) (int, error) {
	k := 0
	if r.needNL && len(dst) > 0 {
		dst[k] = '\n'
		k++
		r.needNL = false
	}
	for k < len(dst) {
		if r.f == nil {
			if r.i == len(r.inputs) {
				r.done = !r.needNL
				return k, nil
			}
			f, err := os.Open(r.inputs[r.i].Path)
			if err != nil {
				return k, fmt.Errorf("linesort: input: %w", err)
			}
			r.f, r.last = f, '\n'
		}
		m, err := r.f.Read(dst[k:])
		if m > 0 {
			r.last = dst[k+m-1]
			k += m
			r.progress(extsort.PhaseRead, int64(m))
		}
		if err == io.EOF {
			r.f.Close()
			r.f = nil
			r.i++
			if r.last != '\n' {
				if k < len(dst) {
					dst[k] = '\n'
					k++
				} else {
					r.needNL = true
				}
			}
			continue
		}
		if err != nil {
			return k, fmt.Errorf("linesort: input %s: %w", r.inputs[r.i].Path, err)
		}
	}
	return k, nil
}

func (r *lineReader) close() {
	if r.f != nil {
		r.f.Close()
	}
}

// partWriter writes the output as partition.<n> files in dir, starting a
// new one at the first line end at or past size bytes.
type partWriter struct {
	dir        string
	size       int64
	buf        int
	progress   func(extsort.Phase, int64)
	unreported int64 // bytes written and not yet reported to progress
	n          int
	f          *os.File
	lw         *lineWriter
	total      int64
}

func (p *partWriter) put(line []byte) error {
	if p.f == nil || p.lw.n >= p.size {
		if err := p.next(); err != nil {
			return err
		}
	}
	n := int64(len(line)) + 1
	p.total += n
	if p.unreported += n; p.unreported >= 1<<20 {
		p.progress(extsort.PhaseMerge, p.unreported)
		p.unreported = 0
	}
	return p.lw.put(line)
}

// next closes the current file and opens the next one.
func (p *partWriter) next() error {
	if err := p.close(); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(p.dir, record.PartitionPrefix+strconv.Itoa(p.n)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("linesort: output: %w", err)
	}
	p.f, p.lw = f, &lineWriter{w: bufio.NewWriterSize(f, p.buf)}
	p.n++
	return nil
}

// close flushes and closes the current file, if any.
func (p *partWriter) close() error {
	p.progress(extsort.PhaseMerge, p.unreported)
	p.unreported = 0
	if p.f == nil {
		return nil
	}
	err := p.lw.w.Flush()
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	p.f = nil
	if err != nil {
		return fmt.Errorf("linesort: output: %w", err)
	}
	return nil
}

// abort closes the current file after a failure (the staging directory
// it is in is removed).
func (p *partWriter) abort() {
	if p.f != nil {
		p.f.Close()
		p.f = nil
	}
}
