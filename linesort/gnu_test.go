package linesort

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/linesort/linetest"
	"github.com/gantryhq/gantry/record"
)

// TestMain fails the package's tests if any goroutine a sort started is
// still running when they end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// optionsOf turns GNU sort arguments into Options.
func optionsOf(t *testing.T, args []string) Options {
	o, err := ParseArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestSortMatchesGNUSort sorts generated and adversarial inputs with every
// case of linetest.Cases, in memory and spilled (tiny chunks, merges in several
// passes), and checks that the output is byte for byte GNU sort's.
func TestSortMatchesGNUSort(t *testing.T) {
	t.Parallel()
	gnu, err := exec.LookPath("sort")
	if err != nil {
		t.Fatalf("GNU sort (coreutils) is needed to compare with: %v", err)
	}
	inputs := map[string][][]byte{
		"generated":   {linetest.Generated(1, 3000), linetest.Generated(2, 2000)},
		"adversarial": linetest.Adversarial(),
		"duplicates":  {linetest.Duplicates(3, 4000)},
	}
	for name, files := range inputs {
		dir := t.TempDir()
		var paths []string
		for i, data := range files {
			p := filepath.Join(dir, fmt.Sprintf("in-%d", i))
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		for _, args := range linetest.Cases {
			want := linetest.GNUSort(t, gnu, args, paths)
			for _, spilled := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%q/spilled=%v", name, args, spilled), func(t *testing.T) {
					ord, err := NewOrder(optionsOf(t, args))
					if err != nil {
						t.Fatal(err)
					}
					chunk, fanIn := 0, 0
					if spilled {
						chunk, fanIn = 3200, 3
					}
					got, st := sortFiles(t, ord, dir, 5000, chunk, fanIn)
					if !bytes.Equal(got, want) {
						t.Fatalf("output differs from GNU sort %q: %s", args, firstDiff(got, want))
					}
					if spilled && st.InMemory {
						t.Errorf("a sort with 3,200-byte chunks stayed in memory")
					}
				})
			}
		}
	}
}

// sortFiles sorts the files of dir (in name order) with ord into
// partitions of about partSize bytes, in chunks of chunk bytes merged
// fanIn at a time (0: the defaults), and returns them concatenated.
func sortFiles(t *testing.T, ord *Order, dir string, partSize int64, chunk, fanIn int) ([]byte, Stats) {
	t.Helper()
	in, _, err := extsort.ScanFiles([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cfg := Config{Memory: MinMemory, TempDir: t.TempDir(), PartitionSize: partSize, Workers: 3, ChunkBytes: chunk, testFanIn: fanIn}
	st, err := Sort(t.Context(), cfg, ord, in, out)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for n := 0; ; n++ {
		b, err := os.ReadFile(filepath.Join(out, record.PartitionPrefix+fmt.Sprint(n)))
		if os.IsNotExist(err) {
			if n != st.Partitions {
				t.Errorf("%d partition files, Stats says %d", n, st.Partitions)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 && len(b) == 0 {
			t.Errorf("partition %d is empty", n)
		}
		got = append(got, b...)
	}
	if int64(len(got)) != st.Bytes {
		t.Errorf("%d bytes of output, Stats says %d", len(got), st.Bytes)
	}
	return got, st
}

// firstDiff describes where got and want first differ, line by line.
func firstDiff(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := range min(len(g), len(w)) {
		if !bytes.Equal(g[i], w[i]) {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, trunc(g[i]), trunc(w[i]))
		}
	}
	return fmt.Sprintf("got %d lines, want %d", len(g), len(w))
}

func trunc(b []byte) []byte {
	if len(b) > 120 {
		return b[:120]
	}
	return b
}

// TestNewOrderRefusesBadKeys checks that a bad -k or option combination
// is an error naming it, as GNU sort refuses them.
func TestNewOrderRefusesBadKeys(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Keys: []string{"0"}}, "field number is zero"},
		{Options{Keys: []string{"1.0"}}, "character offset is zero"},
		{Options{Keys: []string{"x"}}, "invalid number at field start"},
		{Options{Keys: []string{"1,0"}}, "field number is zero"},
		{Options{Keys: []string{"1,"}}, "invalid number after ','"},
		{Options{Keys: []string{"1."}}, "invalid number after '.'"},
		{Options{Keys: []string{"1nq"}}, "stray character"},
		{Options{Keys: []string{"1g"}}, "not supported"},
		{Options{Keys: []string{"1nd"}}, "n and d are incompatible"},
		{Options{Keys: []string{"1,2in"}}, "n and i are incompatible"},
		{Options{Numeric: true, Dictionary: true}, "n and d are incompatible"},
		{Options{Numeric: true, Printable: true, Keys: []string{"2"}}, "n and i are incompatible"}, // the key takes both
		{Options{Separator: "::"}, "more than one byte"},
	} {
		_, err := NewOrder(tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewOrder(%+v) = %v, want an error saying %q", tc.o, err, tc.want)
		}
	}
}

// TestLongerLineThanChunkIsRefused: a line that does not fit a chunk is an
// error that says so and how to fix it, and leaves no output and no temp
// files.
func TestLongerLineThanChunkIsRefused(t *testing.T) {
	t.Parallel()
	in, out, tmp := t.TempDir(), t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(in, "a"), append(bytes.Repeat([]byte("x\n"), 2000), bytes.Repeat([]byte("y"), 1500)...), 0o644)
	files, _, err := extsort.ScanFiles([]string{in})
	if err != nil {
		t.Fatal(err)
	}
	ord, _ := NewOrder(Options{})
	_, err = Sort(t.Context(), Config{Memory: MinMemory, TempDir: tmp, ChunkBytes: 1000}, ord, files, out)
	if err == nil || !strings.Contains(err.Error(), "a line of more than 1000 bytes") {
		t.Fatalf("Sort = %v, want the long line refused", err)
	}
	for _, d := range []string{out, tmp} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s holds %v after the failed sort", d, ents)
		}
	}
}

// TestCancelledSortLeavesNothing: a sort cancelled while it spills leaves
// the output directory's earlier partitions as they were and no temp
// files.
func TestCancelledSortLeavesNothing(t *testing.T) {
	t.Parallel()
	in, out, tmp := t.TempDir(), t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(in, "a"), linetest.Generated(5, 2000), 0o644)
	os.WriteFile(filepath.Join(out, "partition.0"), []byte("earlier\n"), 0o644)
	files, _, _ := extsort.ScanFiles([]string{in})
	ord, _ := NewOrder(Options{Keys: []string{"2,2n"}})
	ctx, cancel := context.WithCancel(t.Context())
	reads := 0
	cfg := Config{Memory: MinMemory, TempDir: tmp, ChunkBytes: 2000, testFanIn: 2, Progress: func(p extsort.Phase, _ int64) {
		if reads++; reads == 10 {
			cancel()
		}
	}}
	if _, err := Sort(ctx, cfg, ord, files, out); err == nil {
		t.Fatal("a cancelled sort succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "partition.0")); string(b) != "earlier\n" {
		t.Errorf("the earlier partition now holds %q", b)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 1 {
		t.Errorf("the output dir holds %v", ents)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("the temp dir holds %v", ents)
	}
}

// TestRandomOptionsMatchGNUSort draws option sets (globals, -t, up to
// two -k with options at either end) and short lines over an alphabet of
// blanks, separators, signs, digits, both cases, NUL and 0xff, in up to
// three files (some empty, some without a final newline): NewOrder
// refuses exactly what GNU sort refuses, and the output, in memory and
// spilled into runs of a few lines merged two or three at a time, is GNU
// sort's.
func TestRandomOptionsMatchGNUSort(t *testing.T) {
	t.Parallel()
	gnu, err := exec.LookPath("sort")
	if err != nil {
		t.Fatalf("GNU sort (coreutils) is needed to compare with: %v", err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	for it := range 150 {
		args := linetest.RandomArgs(r)
		dir := t.TempDir()
		var paths []string
		for f := range 1 + r.IntN(3) {
			p := filepath.Join(dir, fmt.Sprintf("in-%d", f))
			os.WriteFile(p, linetest.RandomLines(r), 0o644)
			paths = append(paths, p)
		}
		cmd := exec.Command(gnu, append(slices.Clone(args), paths...)...)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		want, gerr := cmd.Output()
		ord, err := NewOrder(optionsOf(t, args))
		if (gerr != nil) != (err != nil) {
			t.Fatalf("%d: %q: GNU sort's error %v, NewOrder's %v", it, args, gerr, err)
		}
		if err != nil {
			continue
		}
		for _, sh := range [][2]int{{0, 0}, {20 + r.IntN(40), 2}, {60 + r.IntN(100), 3}} {
			got, _ := sortFiles(t, ord, dir, int64(1+r.IntN(50)), sh[0], sh[1])
			if !bytes.Equal(got, want) {
				t.Fatalf("%d: %q, chunks of %d bytes: output differs from GNU sort's: %s", it, args, sh[0], firstDiff(got, want))
			}
		}
	}
}

// TestNoInputFiles: no input files (an empty -I) sort to no partition,
// at once.
func TestNoInputFiles(t *testing.T) {
	ord, _ := NewOrder(Options{Keys: []string{"2n"}})
	out := t.TempDir()
	st, err := Sort(t.Context(), Config{Memory: MinMemory, TempDir: t.TempDir()}, ord, nil, out)
	if err != nil || st.Lines != 0 || st.Partitions != 0 {
		t.Fatalf("Sort of nothing = %+v, %v", st, err)
	}
}

// TestLongLinesMergeWithinBudget: runs of multi-megabyte lines are merged
// a few at a time, so the cursors' gathered lines stay within the budget.
func TestLongLinesMergeWithinBudget(t *testing.T) {
	ord, _ := NewOrder(Options{Keys: []string{"1"}})
	cfg, _ := Config{Memory: 64 << 20}.withDefaults()
	if n := cfg.fanIn(ord, 4<<20); n*(2*(4<<20)+keyRoom(ord, 4<<20)) > int(cfg.Memory) {
		t.Errorf("a merge of runs of 4 MiB lines opens %d at a budget of 64 MiB", n)
	}
	if n := cfg.fanIn(ord, 100); n != int(cfg.Memory/2/int64(cfg.ioBuf())) {
		t.Errorf("a merge of short lines opens %d runs, want half the budget in read buffers", n)
	}
}
