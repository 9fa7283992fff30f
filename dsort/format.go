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

// sampleLines reads the full keys of up to n lines at evenly spaced
// offsets over all of inputs (the line that starts at or after each), in
// input order, each as a uvarint length and the key, and estimates the
// inputs' lines from the sampled lines' mean length.
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
	var sampled, lineBytes int64
	fi, base := 0, int64(0) // inputs[fi] starts at byte base
	r := &lineAt{}
	defer r.close()
	for j := range n {
		off := (2*int64(j) + 1) * total / (2 * int64(n))
		for off >= base+inputs[fi].Size {
			base += inputs[fi].Size
			fi++
		}
		line, ok, err := r.read(inputs[fi], off-base)
		if err != nil {
			return nil, 0, fmt.Errorf("dsort: sample %s: %w", inputs[fi].Path, err)
		}
		if !ok {
			continue // in the file's last line: the next sample will do
		}
		key = ord.AppendFullKey(key[:0], line)
		out = binary.AppendUvarint(out, uint64(len(key)))
		out = append(out, key...)
		sampled++
		lineBytes += int64(len(line)) + 1
	}
	lines := int64(0)
	if sampled > 0 {
		lines = max(1, int64(math.Round(float64(total)*float64(sampled)/float64(lineBytes))))
	}
	return out, lines, nil
}

// lineAt reads lines of input files at offsets, a file open at a time.
type lineAt struct {
	path string
	f    *os.File
	buf  []byte
	line []byte
}

// read returns the first line of in that starts at or after off (a line
// starts at 0 and after every newline), without its newline; false when
// none does. It is valid until the next read.
func (r *lineAt) read(in extsort.Input, off int64) ([]byte, bool, error) {
	if r.path != in.Path {
		r.close()
		f, err := os.Open(in.Path)
		if err != nil {
			return nil, false, err
		}
		r.f, r.path = f, in.Path
	}
	if r.buf == nil {
		r.buf = make([]byte, 64<<10)
	}
	start := off
	if off > 0 {
		nl, err := r.scan(off-1, in.Size, nil)
		if err != nil || nl < 0 {
			return nil, false, err
		}
		start = nl + 1
	}
	if start >= in.Size {
		return nil, false, nil
	}
	r.line = r.line[:0]
	if _, err := r.scan(start, in.Size, &r.line); err != nil {
		return nil, false, err
	}
	return r.line, true, nil
}

// scan returns the offset of the first newline at or after off before
// size (-1 if none), appending the bytes before it to *into if set.
func (r *lineAt) scan(off, size int64, into *[]byte) (int64, error) {
	for off < size {
		n := int(min(int64(len(r.buf)), size-off))
		if _, err := r.f.ReadAt(r.buf[:n], off); err != nil {
			return 0, err
		}
		i := bytes.IndexByte(r.buf[:n], '\n')
		if into != nil {
			end := n
			if i >= 0 {
				end = i
			}
			*into = append(*into, r.buf[:end]...)
		}
		if i >= 0 {
			return off + int64(i), nil
		}
		off += int64(n)
	}
	return -1, nil
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

// lineCuts cuts one run of sorted lines at bounds (lineSplits).
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
	srch := linesort.NewSearcher(ord, f, size)
	s := make([]int64, 0, len(bounds)+2)
	s = append(s, 0)
	for b, bd := range bounds {
		lower, err := srch.Search(0, bd.Key, false)
		if err != nil {
			return nil, err
		}
		cut := lower
		if self <= bd.Worker {
			upper, err := srch.Search(lower, bd.Key, true)
			if err != nil {
				return nil, err
			}
			cut = upper
			if self == bd.Worker {
				// The lines of the boundary's key up to its rank, counting
				// those in earlier runs; then all of this run's are seen.
				if cut, _, err = srch.Skip(lower, upper, max(bd.Count-seen[b], 0)); err != nil {
					return nil, err
				}
				_, n, err := srch.Skip(lower, upper, math.MaxInt64)
				if err != nil {
					return nil, err
				}
				seen[b] += n
			}
		}
		s = append(s, max(cut, s[len(s)-1]))
	}
	return append(s, size), nil
}
