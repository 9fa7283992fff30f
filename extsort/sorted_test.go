package extsort

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// SortInMemory is the stable sort of its inputs, read back through ReadAt
// at any offset and length, and usable as a merge segment.
func TestSortInMemoryReadsBackTheStableSort(t *testing.T) {
	for _, read := range []bool{false, true} {
		t.Run(map[bool]string{false: "mapped", true: "read"}[read], func(t *testing.T) {
			defer func(old bool) { readNotMap = old }(readNotMap)
			readNotMap = read
			testSortInMemoryReadsBack(t)
		})
	}
}

// testSortInMemoryReadsBack is TestSortInMemoryReadsBackTheStableSort for
// one way of holding the input.
func testSortInMemoryReadsBack(t *testing.T) {
	ctx := t.Context()
	for name, d := range dists {
		t.Run(name, func(t *testing.T) {
			const n = 20011
			all := makeRecords(3, n, d)
			dir := t.TempDir()
			writeInputs(t, dir, all, []int{7, 0, 10000, n - 10007})
			inputs, _, err := ScanInputs([]string{dir})
			if err != nil {
				t.Fatal(err)
			}
			var read int64
			s, err := SortInMemory(ctx, Config{Memory: 64 << 20, Workers: 3}, inputs, func(b int64) { read += b })
			if err != nil {
				t.Fatal(err)
			}
			defer s.Free()
			if s.Records() != n || read != int64(len(all)) {
				t.Fatalf("%d records, %d bytes read; want %d and %d", s.Records(), read, n, len(all))
			}
			want := referenceSort(all)
			got := make([]byte, len(want))
			if k, err := s.ReadAt(got, 0); k != len(got) || err != nil {
				t.Fatalf("ReadAt(all) = %d, %v", k, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("sorted data differs from the stable reference at byte %d", firstDiff(got, want))
			}
			// Unaligned reads, and reads running past the end.
			for _, r := range []struct{ off, n int }{{0, 1}, {5, 10}, {99, 2}, {150, 333}, {len(want) - 7, 7}, {len(want) - 50, 100}, {len(want), 10}} {
				p := make([]byte, r.n)
				k, err := s.ReadAt(p, int64(r.off))
				end := min(r.off+r.n, len(want))
				if k != end-r.off || !bytes.Equal(p[:k], want[r.off:end]) {
					t.Errorf("ReadAt(%d bytes at %d) = %d bytes %q, want %q", r.n, r.off, k, p[:k], want[r.off:end])
				}
				if (end < r.off+r.n) != errors.Is(err, io.EOF) || (err != nil && !errors.Is(err, io.EOF)) {
					t.Errorf("ReadAt(%d bytes at %d): err %v", r.n, r.off, err)
				}
			}
			// As a segment of a merge, together with a file segment.
			other := referenceSort(makeRecords(4, 5000, d))
			path := filepath.Join(t.TempDir(), "run")
			writeInputs(t, filepath.Dir(path), other, []int{5000})
			files, _, _ := ScanInputs([]string{filepath.Dir(path)})
			var out bytes.Buffer
			segs := []Segment{{Path: "kept", Offset: 100 * recSize, Length: int64(len(want)) - 100*recSize, Reader: s}, {Path: files[0].Path, Length: int64(len(other))}}
			if err := Merge(ctx, Config{Memory: MinMemory}, segs, &out, nil); err != nil {
				t.Fatal(err)
			}
			ref := referenceSort(append(append([]byte(nil), want[100*recSize:]...), other...))
			if !bytes.Equal(out.Bytes(), ref) {
				t.Fatalf("merge with a Sorted segment differs from the reference at byte %d", firstDiff(out.Bytes(), ref))
			}
		})
	}
}

// An input file truncated while its records are held mapped makes ReadAt
// fail with ErrBadInput instead of crashing the process.
func TestSortInMemoryInputTruncatedUnderIt(t *testing.T) {
	dir := t.TempDir()
	writeInputs(t, dir, makeRecords(5, 200000, dists["uniform"]), []int{200000})
	inputs, _, err := ScanInputs([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	s, err := SortInMemory(t.Context(), Config{Memory: 64 << 20, Workers: 2}, inputs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	if !s.in.mapped {
		t.Skip("inputs are not mapped on this system")
	}
	if err := os.Truncate(inputs[0].Path, 0); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 200000*recSize)
	if _, err := s.ReadAt(p, 0); !errors.Is(err, ErrBadInput) {
		t.Fatalf("ReadAt of a truncated input: %v, want ErrBadInput", err)
	}
}

// An input that shrank between ScanInputs and the sort is ErrBadInput,
// mapped or read.
func TestSortInMemoryInputShrankBeforeTheSort(t *testing.T) {
	for _, read := range []bool{false, true} {
		defer func(old bool) { readNotMap = old }(readNotMap)
		readNotMap = read
		dir := t.TempDir()
		writeInputs(t, dir, makeRecords(6, 100000, dists["uniform"]), []int{100000})
		inputs, _, err := ScanInputs([]string{dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(inputs[0].Path, 30000*recSize); err != nil {
			t.Fatal(err)
		}
		if _, err := SortInMemory(t.Context(), Config{Memory: 64 << 20, Workers: 2}, inputs, nil); !errors.Is(err, ErrBadInput) {
			t.Fatalf("read %v: SortInMemory of a shrunk input: %v, want ErrBadInput", read, err)
		}
	}
}

func TestSortInMemoryRefusesWhatDoesNotFit(t *testing.T) {
	dir := t.TempDir()
	all := makeRecords(5, 200000, dists["uniform"])
	writeInputs(t, dir, all, []int{200000})
	inputs, _, err := ScanInputs([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Memory: MinMemory, Workers: 1}
	if FitsOneChunk(cfg, 200000) {
		t.Fatalf("200000 records fit one chunk of %d bytes", MinMemory)
	}
	if _, err := SortInMemory(t.Context(), cfg, inputs, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("err = %v, want ErrConfig", err)
	}
	if !FitsOneChunk(Config{Memory: 64 << 20, Workers: 1}, 200000) {
		t.Fatal("200000 records do not fit 64 MiB")
	}
}

func TestSortInMemoryEmpty(t *testing.T) {
	s, err := SortInMemory(t.Context(), Config{Memory: MinMemory}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := s.ReadAt(make([]byte, 10), 0); k != 0 || err != io.EOF {
		t.Fatalf("ReadAt on empty = %d, %v", k, err)
	}
	s.Free()
	s.Free()
}

// A merge of one segment (a file range, or a Sorted) is that segment.
func TestMergeOneSegmentIsACopy(t *testing.T) {
	dir := t.TempDir()
	data := referenceSort(makeRecords(8, 30000, dists["fewkeys"]))
	writeInputs(t, dir, data, []int{30000})
	inputs, _, err := ScanInputs([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	s, err := SortInMemory(t.Context(), Config{Memory: 64 << 20}, inputs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	for _, seg := range []Segment{
		{Path: inputs[0].Path, Offset: 700 * recSize, Length: 25000 * recSize},
		{Path: inputs[0].Path, Offset: 700 * recSize, Length: 25000 * recSize, Map: true},
		{Path: "kept", Offset: 700 * recSize, Length: 25000 * recSize, Reader: s},
	} {
		var out bytes.Buffer
		var progress int64
		empty := Segment{Path: inputs[0].Path}
		if err := Merge(t.Context(), Config{Memory: MinMemory}, []Segment{empty, seg, empty}, &out, func(n int64) { progress += n }); err != nil {
			t.Fatal(err)
		}
		if want := data[700*recSize : 25700*recSize]; !bytes.Equal(out.Bytes(), want) || progress != int64(len(want)) {
			t.Fatalf("%s (map %v): merged %d bytes (progress %d), want the %d bytes of the segment", seg.Path, seg.Map, out.Len(), progress, len(want))
		}
	}
}

// blockBuffer is a BlockWriter lending blocks of awkward sizes (some too
// small for a record, some not a multiple of one).
type blockBuffer struct {
	bytes.Buffer
	block []byte
	sizes []int
	i     int
}

func (b *blockBuffer) Block() []byte {
	b.i++
	b.block = make([]byte, b.sizes[b.i%len(b.sizes)])
	return b.block
}

func (b *blockBuffer) Commit(n int) error {
	b.Write(b.block[:n])
	return nil
}

// A merge into a writer that lends its buffers writes the same bytes.
func TestMergeIntoLentBlocks(t *testing.T) {
	dir := t.TempDir()
	all := makeRecords(9, 20000, dists["fewkeys"])
	a, b := referenceSort(all[:12000*recSize]), referenceSort(all[12000*recSize:])
	writeInputs(t, dir, append(append([]byte(nil), a...), b...), []int{20000})
	path := filepath.Join(dir, "input-0000")
	segs := []Segment{{Path: path, Length: int64(len(a))}, {Path: path, Offset: int64(len(a)), Length: int64(len(b))}}
	want := referenceSort(all)
	for _, segs := range [][]Segment{segs, segs[1:]} {
		out := &blockBuffer{sizes: []int{250, 99, 4000, 100, 1 << 20, 0}}
		if err := Merge(t.Context(), Config{Memory: MinMemory}, segs, out, nil); err != nil {
			t.Fatal(err)
		}
		w := want
		if len(segs) == 1 {
			w = b
		}
		if !bytes.Equal(out.Bytes(), w) {
			t.Fatalf("%d segments: merged %d bytes differ from the reference (%d bytes) at %d", len(segs), out.Len(), len(w), firstDiff(out.Bytes(), w))
		}
	}
}

// sortSmallBucket and quickSort order any bucket as a comparison sort does,
// whatever its next key byte (0xff included) and however many entries
// share it.
func TestSortSmallBucketAndQuickSort(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	for _, n := range []int{2, 33, 100, 1000, smallBucket} {
		for _, third := range []int{256, 2, 1} { // distinct values of the third key byte
			a := make([]entry, n)
			for i := range a {
				a[i] = entry{hi: 0xab12<<48 | uint64(255-r.IntN(third))<<40 | r.Uint64()>>40, lo: r.Uint64()&^indexMask | uint64(i)}
			}
			want := slices.Clone(a)
			slices.SortFunc(want, entryCmp)
			got := slices.Clone(a)
			sortSmallBucket(got, make([]entry, n))
			if !slices.Equal(got, want) {
				t.Fatalf("sortSmallBucket of %d entries (%d third bytes) is not sorted", n, third)
			}
			got = slices.Clone(a)
			quickSort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("quickSort of %d entries (%d third bytes) is not sorted", n, third)
			}
		}
	}
}
