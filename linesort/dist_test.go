package linesort

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/linesort/linetest"
)

// TestRunsCutAndMergedAsOneSort: the distributed pieces agree with one
// sort. Inputs sorted into runs (SortRuns, small chunks), every run cut at
// random full keys (Searcher.Search, lower and strict, checked against a
// scan of the run's lines) into ranges, and the ranges of each cut merged
// in run order (MergeSegments) give, concatenated, what Sort writes —
// under random orders, with lines longer than the searcher's buffer.
func TestRunsCutAndMergedAsOneSort(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for it := range 40 {
		args := linetest.RandomArgs(r)
		ord, err := NewOrder(optionsOf(t, args))
		if err != nil {
			continue
		}
		dir := t.TempDir()
		var data []byte
		for f := range 3 {
			b := linetest.RandomLines(r)
			if f == 1 {
				b = append(b, strings.Repeat("x,9 ", 2000)+"\n"...) // 8,000 bytes: longer than a probe's read
			}
			data = append(data, b...)
			if err := os.WriteFile(filepath.Join(dir, string(rune('a'+f))), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		inputs, _, err := extsort.ScanFiles([]string{dir})
		if err != nil {
			t.Fatal(err)
		}
		runDir := t.TempDir()
		runs, err := SortRuns(t.Context(), Config{Memory: MinMemory, ChunkBytes: 9000 + r.IntN(200)}, ord, inputs, runDir)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := sortFiles(t, ord, dir, 0, 0, 0)
		// Cut keys: full keys of random input lines, sorted.
		lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
		var cuts [][]byte
		for range 1 + r.IntN(4) {
			cuts = append(cuts, ord.AppendFullKey(nil, lines[r.IntN(len(lines))]))
		}
		slices.SortFunc(cuts, bytes.Compare)
		var got []byte
		offs := make([][]int64, len(runs))
		for i, run := range runs {
			offs[i] = cutRun(t, ord, run, cuts)
		}
		for p := 0; p <= len(cuts); p++ {
			var segs []extsort.Segment
			for i, run := range runs {
				segs = append(segs, extsort.Segment{Path: run, Offset: offs[i][p], Length: offs[i][p+1] - offs[i][p]})
			}
			var b bytes.Buffer
			if err := MergeSegments(t.Context(), ord, 1<<20, segs, &b, nil); err != nil {
				t.Fatal(err)
			}
			got = append(got, b.Bytes()...)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d: %q: runs cut at %d keys and merged differ from one sort: %s", it, args, len(cuts), firstDiff(got, want))
		}
	}
}

// cutRun cuts the sorted run file at each of cuts with Search (lower
// bound at even cuts, strict at odd ones) and checks each cut against a
// scan; it returns 0, the cuts' offsets and the size.
func cutRun(t *testing.T, ord *Order, path string, cuts [][]byte) []int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := NewSearcher(ord, f, int64(len(data)))
	offs := []int64{0}
	for i, key := range cuts {
		strict := i%2 == 1
		got, err := s.Search(offs[len(offs)-1], key, strict)
		if err != nil {
			t.Fatal(err)
		}
		// The scan: the first line start whose full key is past the cut.
		want := int64(len(data))
		for off := offs[len(offs)-1]; off < int64(len(data)); {
			end := off + int64(bytes.IndexByte(data[off:], '\n'))
			c := bytes.Compare(ord.AppendFullKey(nil, data[off:end]), key)
			if c > 0 || c == 0 && !strict {
				want = off
				break
			}
			off = end + 1
		}
		if got != want {
			t.Fatalf("Search(cut %d, strict %v) in a run of %d bytes = %d, want %d", i, strict, len(data), got, want)
		}
		n := int64(bytes.Count(data[got:], []byte("\n")))
		if end, k, err := s.Skip(got, int64(len(data)), n/2); err != nil || k != n/2 || (n > 0 && data[end-1] != '\n') {
			t.Fatalf("Skip(%d lines) = %d, %d, %v", n/2, end, k, err)
		}
		offs = append(offs, got)
	}
	return append(offs, int64(len(data)))
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReaderAt
	n int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.n += int64(len(p))
	return c.r.ReadAt(p, off)
}

// TestSearchReadsALongLineOnce: 200 searches of a run holding an 8 MiB
// line (every probe of which once read the line again: 55 ms a search)
// read the run a few times in all, not once a search, and find what a
// scan finds.
func TestSearchReadsALongLineOnce(t *testing.T) {
	ord, _ := NewOrder(Options{})
	long := bytes.Repeat([]byte("m"), 8<<20)
	data := slices.Concat([]byte("a\nb\n"), long, []byte("\nz\n"))
	cr := &countingReader{r: bytes.NewReader(data)}
	s := NewSearcher(ord, cr, int64(len(data)))
	want := map[string]int64{"a": 0, "b": 2, "c": 4, "m": 4, "n": int64(5 + len(long)), "z": int64(5 + len(long)), "zz": int64(len(data))}
	for range 200 / len(want) {
		for k, off := range want {
			got, err := s.Search(0, ord.AppendFullKey(nil, []byte(k)), false)
			if err != nil || got != off {
				t.Fatalf("Search(%q) = %d, %v; want %d", k, got, err, off)
			}
		}
	}
	if cr.n > 4*int64(len(data)) {
		t.Errorf("200 searches read %d bytes of a %d-byte run", cr.n, len(data))
	}
}
