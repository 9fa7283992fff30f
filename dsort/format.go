package dsort

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/linesort"
	"github.com/gantryhq/gantry/record"
)

// recordFormat is what a job sorts, and so how a worker reads, samples,
// sorts, cuts and merges it: gensort's 100-byte records by their 10-byte
// key (package extsort), or text lines ordered as `LC_ALL=C sort` orders
// them with GNU sort's options (package linesort, --format lines). The
// rest of the job — phases, boundaries, shuffle, recovery — is the same:
// a boundary's key is a record's key or a line's full key
// (linesort.Order.AppendFullKey, the last resort included), both ordered
// as bytes, and pieces are byte ranges of sorted runs.
type recordFormat struct {
	ord  *linesort.Order // nil: gensort records
	spec string          // "" for gensort, else "lines" and the options: RegisterRequest.format
}

// testLineChunk, when set, is the bytes of lines a worker's run holds:
// tests make several runs of small inputs.
var testLineChunk int

// newFormat is the format of lines ordered by o, or gensort records for
// nil.
func newFormat(o *linesort.Options) (recordFormat, error) {
	if o == nil {
		return recordFormat{}, nil
	}
	ord, err := linesort.NewOrder(*o)
	if err != nil {
		return recordFormat{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return recordFormat{ord: ord, spec: formatSpec(o)}, nil
}

// formatSpec names the format of lines ordered by o (nil: gensort).
func formatSpec(o *linesort.Options) string {
	if o == nil {
		return ""
	}
	if s := o.String(); s != "" {
		return "lines " + s
	}
	return "lines"
}

// describeFormat names a format spec for messages.
func describeFormat(spec string) string {
	if spec == "" {
		return "gensort records"
	}
	return "--format " + spec
}

func (f recordFormat) lines() bool { return f.ord != nil }

// scan lists the inputs: gensort inputs must be whole records.
func (f recordFormat) scan(dirs []string) ([]extsort.Input, int64, error) {
	if f.lines() {
		return extsort.ScanFiles(dirs)
	}
	return extsort.ScanInputs(dirs)
}

// sample reads up to n keys spread evenly over inputs, in input order, and
// the number of records they stand for (for lines, an estimate).
func (f recordFormat) sample(inputs []extsort.Input, n int) ([]byte, int64, error) {
	if f.lines() {
		return sampleLines(f.ord, inputs, n)
	}
	return sampleInputs(inputs, n)
}

// sort sorts the inputs into runs (sorter.sort).
func (f recordFormat) sort(ctx context.Context, s *sorter) ([]extsort.Run, *extsort.Sorted, error) {
	if !f.lines() {
		return s.sortRecords(ctx)
	}
	cfg := linesort.Config{Memory: s.plan.sort, TempDir: s.tempDir, Logger: s.logger, ChunkBytes: testLineChunk,
		Progress: func(ph extsort.Phase, n int64) {
			if ph == extsort.PhaseRead && s.progress != nil {
				s.progress(n)
			}
		}}
	paths, err := linesort.SortRuns(ctx, cfg, f.ord, s.inputs, s.runDir)
	if err != nil {
		return nil, nil, err
	}
	runs := make([]extsort.Run, len(paths))
	for i, p := range paths {
		runs[i] = extsort.Run{Path: p}
	}
	return runs, nil, nil
}

// splits cuts every run at the boundaries: splits[r][p] is the byte
// offset of partition p's first record in runs[r] (runSplits).
func (f recordFormat) splits(runs []extsort.Run, bounds []Boundary, self int) ([][]int64, error) {
	if f.lines() {
		return lineSplits(f.ord, runs, bounds, self)
	}
	return runSplits(runs, bounds, self)
}

// merge merges sorted segments into w, stable (ties in segment order).
func (f recordFormat) merge(ctx context.Context, cfg extsort.Config, segs []extsort.Segment, w io.Writer, progress func(int64)) error {
	if f.lines() {
		return linesort.MergeSegments(ctx, f.ord, cfg.Memory, segs, w, progress)
	}
	return extsort.Merge(ctx, cfg, segs, w, progress)
}

// checkChunk refuses a received chunk that cannot be part of a piece:
// gensort pieces are whole records, sent in whole records.
func (f recordFormat) checkChunk(data []byte) error {
	if !f.lines() && len(data)%record.Size != 0 {
		return fmt.Errorf("%d bytes, not whole %d-byte records", len(data), record.Size)
	}
	return nil
}

// splitSample checks a worker's sample and returns its keys: whole 10-byte
// keys for gensort, each a uvarint length and the key for lines.
func splitSample(lines bool, keys []byte) ([][]byte, error) {
	var out [][]byte
	if !lines {
		if len(keys)%record.KeySize != 0 {
			return nil, fmt.Errorf("sample of %d bytes is not whole %d-byte keys", len(keys), record.KeySize)
		}
		for i := 0; i < len(keys); i += record.KeySize {
			out = append(out, keys[i:i+record.KeySize])
		}
		return out, nil
	}
	for len(keys) > 0 {
		n, k := binary.Uvarint(keys)
		if k <= 0 || n > uint64(len(keys)-k) {
			return nil, fmt.Errorf("sample of lines' keys is cut short")
		}
		out = append(out, keys[k:k+int(n)])
		keys = keys[k+int(n):]
	}
	return out, nil
}

// maxSampleKey bounds a sampled line's full key: 10,000 of them must fit
// gRPC's 4 MiB message (SubmitSample) and the boundaries made of them the
// partition config. A key cut short is still a valid split point: full
// keys are prefix-free, so no line's full key equals a cut one, and every
// line orders before or after it by key alone (its rank plays no part).
const maxSampleKey = 256

// sampleLines reads the full keys of up to n lines, the line that holds
// each of n evenly spaced offsets over all of inputs (a long line is drawn
// as often as its length says), in input order, each as a uvarint length
// and the key (cut to maxSampleKey bytes), and estimates the inputs' lines:
// a line of L bytes is drawn with probability about L·n/total, so
// total/n · Σ 1/L over the draws counts each line once on average.
func sampleLines(ord *linesort.Order, inputs []extsort.Input, n int) ([]byte, int64, error) {
	var total int64
	for _, in := range inputs {
		total += in.Size
	}
	if total == 0 || n <= 0 {
		return nil, 0, nil
	}
	n = int(min(int64(n), total))
	var out, key []byte
	var inverse float64     // Σ 1/L over the draws
	fi, base := 0, int64(0) // inputs[fi] starts at byte base
	r := &lineAt{}
	defer r.close()
	for j := range n {
		off := (2*int64(j) + 1) * total / (2 * int64(n))
		for off >= base+inputs[fi].Size {
			base += inputs[fi].Size
			fi++
		}
		line, again, err := r.read(inputs[fi], off-base)
		if err != nil {
			return nil, 0, fmt.Errorf("dsort: sample %s: %w", inputs[fi].Path, err)
		}
		if !again { // the same line as the last draw has the same key
			key = ord.AppendFullKey(key[:0], line)
			key = key[:min(len(key), maxSampleKey)]
		}
		out = binary.AppendUvarint(out, uint64(len(key)))
		out = append(out, key...)
		inverse += 1 / float64(len(line)+1)
	}
	return out, max(1, int64(math.Round(float64(total)/float64(n)*inverse))), nil
}

// lineAt reads the lines of input files that hold given offsets, a file
// open at a time. Offsets come in increasing order: the last line found is
// kept, so every draw in one long line costs one read of it.
type lineAt struct {
	path       string
	f          *os.File
	buf        []byte
	start, end int64  // the last line found: [start, end), end at its newline or the file's end
	line       []byte // its bytes
}

// read returns the line of in that holds byte off (without its newline;
// off < in.Size), and whether it is the line the last read returned. It is
// valid until the next read.
func (r *lineAt) read(in extsort.Input, off int64) ([]byte, bool, error) {
	if r.path != in.Path {
		r.close()
		f, err := os.Open(in.Path)
		if err != nil {
			return nil, false, err
		}
		r.f, r.path, r.start, r.end = f, in.Path, -1, -1
	}
	if r.buf == nil {
		r.buf = make([]byte, 64<<10)
	}
	if off >= r.start && off <= r.end && r.start >= 0 {
		return r.line, true, nil // the same line, or its newline
	}
	start, err := r.lineStart(off)
	if err != nil {
		return nil, false, err
	}
	r.line = r.line[:0]
	end := start
	for end < in.Size {
		k := int(min(int64(len(r.buf)), in.Size-end))
		if _, err := r.f.ReadAt(r.buf[:k], end); err != nil {
			return nil, false, err
		}
		i := bytes.IndexByte(r.buf[:k], '\n')
		if i >= 0 {
			r.line = append(r.line, r.buf[:i]...)
			end += int64(i)
			break
		}
		r.line = append(r.line, r.buf[:k]...)
		end += int64(k)
	}
	r.start, r.end = start, end
	return r.line, false, nil
}

// lineStart returns the offset of the line holding off: just past the
// last newline before it, or 0. Past the last line found it need not read
// further back than that line's end.
func (r *lineAt) lineStart(off int64) (int64, error) {
	floor := int64(0)
	if r.end >= 0 && off > r.end {
		floor = r.end + 1
	}
	for hi := off; hi > floor; {
		lo := max(floor, hi-int64(len(r.buf)))
		b := r.buf[:hi-lo]
		if _, err := r.f.ReadAt(b, lo); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return lo + int64(i) + 1, nil
		}
		hi = lo
	}
	return floor, nil
}

func (r *lineAt) close() {
	if r.f != nil {
		r.f.Close()
		r.f, r.path = nil, ""
	}
}

// lineSplits is runSplits for runs of sorted lines, found by binary search
// on the lines' full keys (linesort.Searcher): for every run, the byte
// offsets that cut it into partitions.
func lineSplits(ord *linesort.Order, runs []extsort.Run, bounds []Boundary, self int) ([][]int64, error) {
	splits := make([][]int64, len(runs))
	seen := make([]int64, len(bounds)) // as in runSplits: lines of bounds[b]'s key in earlier runs
	for r, run := range runs {
		s, err := lineCuts(ord, run.Path, bounds, self, seen)
		if err != nil {
			return nil, fmt.Errorf("dsort: cut run %s: %w", run.Path, err)
		}
		splits[r] = s
	}
	return splits, nil
}

// lineCuts cuts one run of sorted lines at bounds (lineSplits). Boundaries
// that share a key (a dominant key cut into many partitions) share its
// range [lower, upper) and its line count, and each rank cut goes on from
// the one before instead of counting from lower again.
func lineCuts(ord *linesort.Order, path string, bounds []Boundary, self int, seen []int64) ([]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	c := &keyRange{srch: linesort.NewSearcher(ord, f, size)}
	s := make([]int64, 0, len(bounds)+2)
	s = append(s, 0)
	for b, bd := range bounds {
		cut, err := c.cut(bd, self, seen, b)
		if err != nil {
			return nil, err
		}
		s = append(s, max(cut, s[len(s)-1]))
	}
	return append(s, size), nil
}

// keyRange is the range of one key's lines in a run, as found for the last
// boundary, for the next one if it has the same key.
type keyRange struct {
	srch         *linesort.Searcher
	key          []byte
	lower, upper int64 // upper -1: not searched yet
	count        int64 // lines in [lower, upper); -1: not counted yet
	skipped      int64 // the last rank cut: lines from lower to rankCut; -1: none
	rankCut      int64
}

// cut is where boundary b, bd, cuts the run (runSplits' rule), adding the
// run's lines of bd's key to seen[b] when the rank decides.
func (c *keyRange) cut(bd Boundary, self int, seen []int64, b int) (int64, error) {
	if c.key == nil || !bytes.Equal(c.key, bd.Key) {
		lower, err := c.srch.Search(0, bd.Key, false)
		if err != nil {
			return 0, err
		}
		*c = keyRange{srch: c.srch, key: append(c.key[:0], bd.Key...), lower: lower, upper: -1, count: -1, skipped: -1}
	}
	if self > bd.Worker {
		return c.lower, nil
	}
	if c.upper < 0 {
		upper, err := c.srch.Search(c.lower, bd.Key, true)
		if err != nil {
			return 0, err
		}
		c.upper = upper
	}
	if self < bd.Worker {
		return c.upper, nil
	}
	if c.count < 0 {
		_, n, err := c.srch.Skip(c.lower, c.upper, math.MaxInt64)
		if err != nil {
			return 0, err
		}
		c.count = n
	}
	// The lines of the key up to its rank, counting those in earlier runs;
	// then all of this run's are seen.
	want := max(bd.Count-seen[b], 0)
	from, already := c.lower, int64(0)
	if c.skipped >= 0 && c.skipped <= want {
		from, already = c.rankCut, c.skipped
	}
	cut, n, err := c.srch.Skip(from, c.upper, want-already)
	if err != nil {
		return 0, err
	}
	c.rankCut, c.skipped = cut, already+n
	seen[b] += c.count
	return cut, nil
}
