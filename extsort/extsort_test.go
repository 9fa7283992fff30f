package extsort

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// keyDist generates the key of record i.
type keyDist func(r *rand.Rand, i int, key []byte)

var dists = map[string]keyDist{
	"uniform": func(r *rand.Rand, _ int, k []byte) {
		for j := range k {
			k[j] = byte(r.Uint32())
		}
	},
	"ascii": func(r *rand.Rand, _ int, k []byte) {
		for j := range k {
			k[j] = ' ' + byte(r.IntN(95))
		}
	},
	"allequal": func(_ *rand.Rand, _ int, k []byte) { copy(k, "SAMEKEY!!!") },
	"fewkeys": func(r *rand.Rand, _ int, k []byte) {
		copy(k, fmt.Sprintf("key%07d", r.IntN(5)))
	},
	// 90% share one key, the rest uniform: the skew the distributed sort must survive.
	"skew90": func(r *rand.Rand, _ int, k []byte) {
		if r.IntN(10) < 9 {
			copy(k, "\x80HEAVYKEY!")
			return
		}
		for j := range k {
			k[j] = byte(r.Uint32())
		}
	},
	// Long shared prefixes: only the last two key bytes differ.
	"prefix": func(r *rand.Rand, _ int, k []byte) {
		copy(k, "PREFIX01")
		k[8], k[9] = byte(r.IntN(4)), byte(r.Uint32())
	},
	"descending": func(_ *rand.Rand, i int, k []byte) {
		clear(k)
		v := uint32(1<<31 - i)
		k[6], k[7], k[8], k[9] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	},
}

// makeRecords returns n records; bytes 10..99 hold the record number so
// that any reordering of equal keys is visible.
func makeRecords(seed uint64, n int, d keyDist) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	buf := make([]byte, n*recSize)
	for i := 0; i < n; i++ {
		rec := buf[i*recSize : (i+1)*recSize]
		d(r, i, rec[:keySize])
		copy(rec[keySize:], fmt.Sprintf("  %032d  ", i))
		rec[recSize-2], rec[recSize-1] = '\r', '\n'
	}
	return buf
}

// referenceSort is the specification: a stable sort by the 10-byte key.
func referenceSort(buf []byte) []byte {
	recs := make([][]byte, len(buf)/recSize)
	for i := range recs {
		recs[i] = buf[i*recSize : (i+1)*recSize]
	}
	slices.SortStableFunc(recs, func(a, b []byte) int { return bytes.Compare(a[:keySize], b[:keySize]) })
	return bytes.Join(recs, nil)
}

// writeInputs spreads buf over files of the given sizes (in records) in dir.
func writeInputs(t testing.TB, dir string, buf []byte, sizes []int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	off := 0
	for i, n := range sizes {
		p := filepath.Join(dir, fmt.Sprintf("input-%04d", i))
		if err := os.WriteFile(p, buf[off:off+n*recSize], 0o644); err != nil {
			t.Fatal(err)
		}
		off += n * recSize
	}
	if off != len(buf) {
		t.Fatalf("sizes cover %d bytes of %d", off, len(buf))
	}
}

// readOutput concatenates partition.<first>… in order and checks that dir
// holds nothing else.
func readOutput(t *testing.T, dir string, first, want int) []byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != want {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("output dir holds %d entries %v, want %d partition files", len(ents), names, want)
	}
	var out []byte
	for i := 0; i < want; i++ {
		b, err := os.ReadFile(filepath.Join(dir, partitionName(first+i)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

func TestSortMatchesStableReference(t *testing.T) {
	tests := []struct {
		name   string
		dist   string
		files  []int // records per input file
		memory int64
		part   int64
		chunk  int // records per in-memory run; 0 = default
	}{
		{"uniform in memory", "uniform", []int{5000, 3000, 0, 2000}, 64 << 20, 0, 0},
		{"uniform external", "uniform", []int{150000, 70000}, MinMemory, 0, 0},
		{"ascii external small partitions", "ascii", []int{100000, 100000}, MinMemory, 1 << 20, 0},
		{"all keys equal external", "allequal", []int{90000, 90000}, MinMemory, 4 << 20, 0},
		{"all keys equal in memory", "allequal", []int{20000}, 64 << 20, 0, 0},
		{"few keys external", "fewkeys", []int{120000, 60000, 1}, MinMemory, 0, 0},
		{"skew90 external", "skew90", []int{200000}, MinMemory, 3 << 20, 0},
		{"shared prefix", "prefix", []int{50000, 50000}, MinMemory, 0, 0},
		{"descending", "descending", []int{30000}, 64 << 20, 0, 0},
		{"one record", "uniform", []int{1}, MinMemory, 0, 0},
		{"partition of one record", "uniform", []int{7}, MinMemory, 100, 0},
		{"in memory many chunks uniform", "uniform", []int{30000, 20000}, 64 << 20, 1 << 20, 1000},
		{"in memory many chunks all equal", "allequal", []int{30000, 20000}, 64 << 20, 1 << 20, 999},
		{"in memory many chunks skew90", "skew90", []int{60000}, 64 << 20, 0, 4096},
		{"in memory many chunks few keys", "fewkeys", []int{9, 40000, 0, 1}, 64 << 20, 100 << 10, 3000},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.chunk > 0 {
				old := memRunRecords
				memRunRecords = int64(tc.chunk)
				defer func() { memRunRecords = old }()
			}
			n := 0
			for _, s := range tc.files {
				n += s
			}
			in := makeRecords(uint64(i), n, dists[tc.dist])
			root := t.TempDir()
			writeInputs(t, filepath.Join(root, "in"), in, tc.files)
			inputs, total, err := ScanInputs([]string{filepath.Join(root, "in")})
			if err != nil {
				t.Fatal(err)
			}
			if total != int64(len(in)) {
				t.Fatalf("ScanInputs total = %d, want %d", total, len(in))
			}
			cfg := Config{Memory: tc.memory, PartitionSize: tc.part, TempDir: filepath.Join(root, "tmp"), FirstPartition: 3}
			os.Mkdir(cfg.TempDir, 0o755)
			st, err := Sort(t.Context(), cfg, inputs, filepath.Join(root, "out"))
			if err != nil {
				t.Fatal(err)
			}
			part := tc.part
			if part == 0 {
				part = defaultPartitionSize
			}
			part -= part % recSize
			wantParts := int((int64(len(in)) + part - 1) / part)
			if st.Partitions != wantParts {
				t.Errorf("Stats.Partitions = %d, want %d", st.Partitions, wantParts)
			}
			got := readOutput(t, filepath.Join(root, "out"), 3, wantParts)
			if want := referenceSort(in); !bytes.Equal(got, want) {
				t.Fatalf("output differs from a stable sort of the input (first difference at byte %d)", firstDiff(got, want))
			}
			if left, _ := os.ReadDir(cfg.TempDir); len(left) != 0 {
				t.Errorf("temp dir not cleaned: %d entries left", len(left))
			}
			if tc.memory == MinMemory && n > 100000 && st.InMemory {
				t.Errorf("expected an external sort with a %d-byte budget", tc.memory)
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestSortEntries(t *testing.T) {
	for name, d := range dists {
		for _, n := range []int{0, 1, 31, 33, 5000, 9000, 70000} {
			for _, workers := range []int{1, 2, 3} {
				buf := makeRecords(uint64(n), n, d)
				es, tmp := make([]entry, n), make([]entry, n)
				makeEntries(buf, es, workers)
				want := slices.Clone(es)
				slices.SortStableFunc(want, entryCmp)
				got := sortEntries(es, tmp, workers)
				if !slices.Equal(got, want) {
					t.Fatalf("%s n=%d workers=%d: radix order differs from a stable comparison sort", name, n, workers)
				}
			}
		}
	}
}

func TestMergeIsStable(t *testing.T) {
	dir := t.TempDir()
	all := makeRecords(1, 30000, dists["fewkeys"])
	// Three sorted segments of one file plus a second file; input order is
	// the order of the segments.
	parts := [][]byte{all[:10000*recSize], all[10000*recSize : 25000*recSize], all[25000*recSize:]}
	var segs []Segment
	var file []byte
	for _, p := range parts {
		s := referenceSort(p)
		segs = append(segs, Segment{Path: filepath.Join(dir, "runs"), Offset: int64(len(file)), Length: int64(len(s))})
		file = append(file, s...)
	}
	if err := os.WriteFile(filepath.Join(dir, "runs"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	segs = append(segs, Segment{Path: filepath.Join(dir, "runs"), Offset: 0, Length: 0}) // empty segment
	var out bytes.Buffer
	var progress int64
	// A tiny budget forces intermediate merge passes. Mapped segments
	// start off page boundaries.
	for _, c := range []struct {
		mem    int64
		mapped bool
	}{{MinMemory, false}, {1 << 30, false}, {1 << 30, true}} {
		for i := range segs {
			segs[i].Map = c.mapped
		}
		out.Reset()
		progress = 0
		if err := Merge(t.Context(), Config{Memory: c.mem, TempDir: dir}, segs, &out, func(n int64) { progress += n }); err != nil {
			t.Fatal(err)
		}
		if want := referenceSort(all); !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("memory %d, mapped %v: merge is not the stable sort of its inputs", c.mem, c.mapped)
		}
		if progress != int64(len(all)) {
			t.Errorf("progress reported %d bytes, want %d", progress, len(all))
		}
	}
}

func TestMergeManySegmentsMultiPass(t *testing.T) {
	dir := t.TempDir()
	all := makeRecords(2, 3000, dists["uniform"])
	var segs []Segment
	var file []byte
	for i := 0; i < 300; i++ { // 300 segments of 10 records > fan-in of a 16 MiB budget
		s := referenceSort(all[i*10*recSize : (i+1)*10*recSize])
		segs = append(segs, Segment{Path: filepath.Join(dir, "runs"), Offset: int64(len(file)), Length: int64(len(s))})
		file = append(file, s...)
	}
	os.WriteFile(filepath.Join(dir, "runs"), file, 0o644)
	var out bytes.Buffer
	if err := Merge(t.Context(), Config{Memory: MinMemory, TempDir: dir}, segs, &out, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), referenceSort(all)) {
		t.Fatal("multi-pass merge is not the stable sort of its inputs")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("merge left %d temp entries", len(ents)-1)
	}
}

func TestScanInputsErrors(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok"), make([]byte, 200), 0o644)
	os.WriteFile(filepath.Join(dir, "bad"), make([]byte, 250), 0o644)
	_, _, err := ScanInputs([]string{dir})
	if !errors.Is(err, ErrBadInput) {
		t.Fatalf("err = %v, want ErrBadInput", err)
	}
	for _, want := range []string{filepath.Join(dir, "bad"), "250 bytes"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, _, err := ScanInputs([]string{filepath.Join(dir, "missing")}); !errors.Is(err, ErrBadInput) {
		t.Errorf("missing dir: err = %v, want ErrBadInput", err)
	}
}

func TestScanInputsOrder(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(b, "z"), filepath.Join(b, "a"), filepath.Join(a, "m")} {
		os.WriteFile(p, make([]byte, 100), 0o644)
	}
	os.Mkdir(filepath.Join(a, "sub"), 0o755)
	os.WriteFile(filepath.Join(a, "sub", "x"), nil, 0o644)
	inputs, total, err := ScanInputs([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range inputs {
		got = append(got, in.Path)
	}
	want := []string{filepath.Join(a, "m"), filepath.Join(a, "sub", "x"), filepath.Join(b, "a"), filepath.Join(b, "z")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("input order (-want +got):\n%s", diff)
	}
	if total != 300 {
		t.Errorf("total = %d, want 300", total)
	}
}

func TestSortEmptyInput(t *testing.T) {
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "in"), 0o755)
	os.WriteFile(filepath.Join(root, "in", "empty"), nil, 0o644)
	inputs, _, err := ScanInputs([]string{filepath.Join(root, "in")})
	if err != nil {
		t.Fatal(err)
	}
	st, err := Sort(t.Context(), Config{TempDir: root}, inputs, filepath.Join(root, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 0 || st.Partitions != 0 {
		t.Errorf("stats = %+v, want nothing sorted", st)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "out")); len(ents) != 0 {
		t.Errorf("output dir holds %d entries, want none", len(ents))
	}
}

func TestSortRejectsForeignFilesInOutput(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "out")
	os.MkdirAll(out, 0o755)
	os.WriteFile(filepath.Join(out, "notes.txt"), []byte("mine"), 0o644)
	_, err := Sort(t.Context(), Config{TempDir: root}, nil, out)
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("err = %v, want ErrConfig for a foreign file", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "notes.txt")); string(b) != "mine" {
		t.Error("the user's file was touched")
	}
}

func TestSortCancelledCleansUp(t *testing.T) {
	root := t.TempDir()
	in := makeRecords(9, 200000, dists["uniform"])
	writeInputs(t, filepath.Join(root, "in"), in, []int{200000})
	inputs, _, _ := ScanInputs([]string{filepath.Join(root, "in")})
	tmp := filepath.Join(root, "tmp")
	os.Mkdir(tmp, 0o755)
	ctx, cancel := context.WithCancel(t.Context())
	cfg := Config{Memory: MinMemory, TempDir: tmp, Progress: func(p Phase, _ int64) {
		if p == PhaseMerge {
			cancel() // in the middle of the merge
		}
	}}
	_, err := Sort(ctx, cfg, inputs, filepath.Join(root, "out"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temp dir holds %d entries after cancel", len(ents))
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "out")); len(ents) != 0 {
		t.Errorf("output dir holds %d entries after cancel", len(ents))
	}
}

func TestScanInputsLinksAndDuplicates(t *testing.T) {
	root := t.TempDir()
	in, other := filepath.Join(root, "in"), filepath.Join(root, "other")
	os.MkdirAll(in, 0o755)
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "data"), make([]byte, 300), 0o644)
	os.WriteFile(filepath.Join(in, "own"), make([]byte, 100), 0o644)
	os.Symlink(filepath.Join(other, "data"), filepath.Join(in, "linked"))
	inputs, total, err := ScanInputs([]string{in})
	if err != nil || total != 400 || len(inputs) != 2 {
		t.Fatalf("a symlink to a file: inputs %v, total %d, err %v; want both files, 400 bytes", inputs, total, err)
	}
	// -I given as a symlink to a directory.
	os.Symlink(other, filepath.Join(root, "otherlink"))
	if _, total, err := ScanInputs([]string{filepath.Join(root, "otherlink")}); err != nil || total != 300 {
		t.Fatalf("-I symlink to a dir: total %d, err %v; want 300 bytes", total, err)
	}
	for name, setup := range map[string]func(dir string){
		"dangling symbolic link": func(d string) { os.Symlink(filepath.Join(d, "nowhere"), filepath.Join(d, "bad")) },
		"link to a directory":    func(d string) { os.Symlink(other, filepath.Join(d, "bad")) },
		"not a regular file":     func(d string) { syscallMkfifo(t, filepath.Join(d, "bad")) },
		"is given twice":         nil,
		"given twice via a link": nil,
	} {
		dir := t.TempDir()
		dirs := []string{dir}
		switch name {
		case "is given twice":
			dirs = []string{in, in}
		case "given twice via a link":
			dirs = []string{other, filepath.Join(root, "otherlink")}
		default:
			setup(dir)
		}
		_, _, err := ScanInputs(dirs)
		if !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: err = %v, want ErrBadInput", name, err)
			continue
		}
		want := "bad"
		if dirs[0] != dir {
			want = "twice"
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not mention %q", name, err, want)
		}
	}
}

func TestSortEmptyInputRemovesStaleOutput(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "out")
	os.MkdirAll(out, 0o755)
	os.WriteFile(filepath.Join(out, "partition.0"), make([]byte, 100), 0o644)
	os.Mkdir(filepath.Join(root, "in"), 0o755)
	inputs, _, _ := ScanInputs([]string{filepath.Join(root, "in")})
	if _, err := Sort(t.Context(), Config{TempDir: root}, inputs, out); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("an empty sort left %d entries (an earlier sort's partitions) in the output dir", len(ents))
	}
}

func TestSortRefusesOverlappingDirs(t *testing.T) {
	root := t.TempDir()
	in := filepath.Join(root, "in")
	writeInputs(t, in, makeRecords(1, 10, dists["uniform"]), []int{10})
	inputs, _, _ := ScanInputs([]string{in})
	for name, c := range map[string]struct{ out, tmp string }{
		"output inside input": {filepath.Join(in, "out"), root},
		"input inside output": {root, t.TempDir()},
		"temp inside input":   {filepath.Join(root, "out"), in},
	} {
		_, err := Sort(t.Context(), Config{TempDir: c.tmp}, inputs, c.out)
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(in, "out")); err == nil {
		t.Error("the refused output dir was created inside the input dir")
	}
}

// TestSortSmallBudgetManyWorkers: a budget too small for every core's
// buffers must still give chunks of many records, and more runs than one
// merge can buffer must be merged in rounds, within the budget.
func TestSortSmallBudgetManyWorkers(t *testing.T) {
	for _, chunkCap := range []int64{0, 5000} {
		old := maxChunkRecords
		maxChunkRecords = chunkCap
		root := t.TempDir()
		n := 30000 // fits the budget: sorted in memory
		if chunkCap > 0 {
			n = 150000 // 15 MB: spilled, 30 runs of 5000
		}
		in := makeRecords(5, n, dists["fewkeys"])
		writeInputs(t, filepath.Join(root, "in"), in, []int{n - 10000, 10000})
		inputs, _, _ := ScanInputs([]string{filepath.Join(root, "in")})
		tmp := filepath.Join(root, "tmp")
		os.Mkdir(tmp, 0o755)
		var log bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
		st, err := Sort(t.Context(), Config{Memory: MinMemory, Workers: 64, TempDir: tmp, PartitionSize: 1 << 20, Logger: logger},
			inputs, filepath.Join(root, "out"))
		maxChunkRecords = old
		if err != nil {
			t.Fatal(err)
		}
		if chunkCap == 0 && st.Runs > 2 {
			t.Errorf("64 workers on a 16 MiB budget made %d runs of 30000 records; one chunk should hold them", st.Runs)
		}
		if chunkCap > 0 && st.Runs != 30 {
			t.Errorf("chunks capped at 5000 records: %d runs, want 30", st.Runs)
		}
		if reduced := strings.Contains(log.String(), "reduced runs"); reduced != (chunkCap > 0) {
			t.Errorf("chunk cap %d: runs merged in rounds = %v; want it exactly when there are more runs than a merge can buffer", chunkCap, reduced)
		}
		got := readOutput(t, filepath.Join(root, "out"), 0, st.Partitions)
		if !bytes.Equal(got, referenceSort(in)) {
			t.Fatalf("chunk cap %d: output is not the stable sort of the input", chunkCap)
		}
		if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
			t.Errorf("temp dir holds %d entries", len(ents))
		}
	}
}
