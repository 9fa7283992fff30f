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
	"github.com/gantryhq/gantry/record"
)

// TestMain fails the package's tests if any goroutine a sort started is
// still running when they end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gnuCases are the orderings compared with GNU sort, as its arguments.
var gnuCases = [][]string{
	{"-n", "-f"},                   // f with n: accepted, no effect
	{"-d", "-i", "-k2,2id"},        // d wins over i
	{"-n", "-d", "-k1,1r", "-k2b"}, // keys with options of their own take neither n nor d
	{},
	{"-r"},
	{"-n"},
	{"-n", "-r", "-s"},
	{"-k2,2"},
	{"-k2"},
	{"-k2,2n", "-k1,1"},
	{"-t,", "-k3,3nr", "-k1,1"},
	{"-k1.3,1.5"},
	{"-k2b,2", "-k3.2b,3.4"},
	{"-t:", "-k2,2", "-s"},
	{"-f", "-k1,1"},
	{"-k3,3d", "-k2,2i"},
	{"-t,", "-k2.2,3.1r"},
	{"-k5,5n"},
	{"-b", "-k2,3"},
	{"-k2,2fr", "-k1,1n"},
	{"-t\t", "-k2,2n", "-k4"},
	{"-s", "-k1,1"},
	{"-d", "-f"},
	{"-k1,1", "-r"},
	{"-t,", "-k4.3n"},
	{"-k2.3b,2.2b"}, // a key that ends before it starts
	{"-i", "-r", "-k3"},
}

// optionsOf turns GNU sort arguments into Options.
func optionsOf(t *testing.T, args []string) Options {
	var o Options
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-k"):
			o.Keys = append(o.Keys, a[2:])
		case strings.HasPrefix(a, "-t"):
			o.Separator = a[2:]
		case a == "-b":
			o.IgnoreBlanks = true
		case a == "-d":
			o.Dictionary = true
		case a == "-f":
			o.Fold = true
		case a == "-i":
			o.Printable = true
		case a == "-n":
			o.Numeric = true
		case a == "-r":
			o.Reverse = true
		case a == "-s":
			o.Stable = true
		default:
			t.Fatalf("no option for %q", a)
		}
	}
	return o
}

// TestSortMatchesGNUSort sorts generated and adversarial inputs with every
// case of gnuCases, in memory and spilled (tiny chunks, merges in several
// passes), and checks that the output is byte for byte GNU sort's.
func TestSortMatchesGNUSort(t *testing.T) {
	t.Parallel()
	gnu, err := exec.LookPath("sort")
	if err != nil {
		t.Fatalf("GNU sort (coreutils) is needed to compare with: %v", err)
	}
	inputs := map[string][][]byte{
		"generated":   {genLines(1, 3000), genLines(2, 2000)},
		"adversarial": adversarial(),
		"duplicates":  {dupLines(3, 4000)},
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
		for _, args := range gnuCases {
			want := gnuSort(t, gnu, args, paths)
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

// gnuSort is `LC_ALL=C sort args paths…`'s output.
func gnuSort(t *testing.T, gnu string, args, paths []string) []byte {
	t.Helper()
	cmd := exec.Command(gnu, append(slices.Clone(args), paths...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sort %q: %v: %s", args, err, stderr.String())
	}
	return out
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
	cfg := Config{Memory: MinMemory, TempDir: t.TempDir(), PartitionSize: partSize, Workers: 3, testChunk: chunk, testFanIn: fanIn}
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

// genLines makes n lines of a few blank-, comma-, colon- or
// tab-separated fields: numbers of every shape, words of both cases,
// punctuation, runs of blanks, empty fields.
func genLines(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	var b bytes.Buffer
	for range n {
		fields := 1 + r.IntN(6)
		for f := range fields {
			if f > 0 {
				b.WriteString([]string{" ", "  ", "\t", ",", ":", " , ", "\t\t"}[r.IntN(7)])
			}
			b.WriteString(genField(r))
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func genField(r *rand.Rand) string {
	switch r.IntN(9) {
	case 0:
		return fmt.Sprint(r.IntN(2000) - 1000)
	case 1:
		return fmt.Sprintf("%.*f", r.IntN(4), (r.Float64()-0.5)*1e4)
	case 2:
		return fmt.Sprintf("%0*d", 1+r.IntN(6), r.IntN(500))
	case 3:
		return []string{"-0", "0", "0.000", "-", ".", "-.5", ".5", "+3", "1e3", "  42", "-0.0", "007.10", "1,234"}[r.IntN(13)]
	case 4:
		return ""
	case 5:
		return strings.Repeat("z", r.IntN(3)) + []string{"Apple", "apple", "APPLE", "banana", "Banana", "bAnana", "_x", "a-b", "a.b", "Ab!c"}[r.IntN(10)]
	default:
		w := make([]byte, 1+r.IntN(8))
		for i := range w {
			w[i] = "abcXYZ019 .-_!~"[r.IntN(15)]
		}
		return string(w)
	}
}

// dupLines makes n lines drawn from a few dozen, so most keys repeat and
// equal keys are ordered by -s or the last resort.
func dupLines(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	pool := bytes.Split(genLines(seed+100, 40), []byte("\n"))
	pool = pool[:len(pool)-1]
	var b bytes.Buffer
	for i := range n {
		b.Write(pool[r.IntN(len(pool))])
		if r.IntN(3) == 0 {
			fmt.Fprintf(&b, " #%d", i%7)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// adversarial is files with what trips line sorters: empty lines and an
// empty file, no final newline (twice, so two last lines meet), a line
// nearly as long as the test's smallest chunk, CRLF, NUL and high bytes,
// lines of blanks, lines with fewer fields than the keys ask for, lines
// that differ only in case or leading zeros, many times over.
func adversarial() [][]byte {
	long := bytes.Repeat([]byte("long line 9 "), 250) // 3,000 bytes
	return [][]byte{
		[]byte("b 2\n\n\na 1\n \n\t\nc,3,x\r\nc,3,x\nc,3\r\n"),
		{},
		[]byte("no final newline 5"),
		[]byte("z\x00y 1\n\x00\nz\xffy -1\n\xe9t\xe9 3\n\xc3\xa9 2\n"),
		append(append([]byte("x 10\n"), long...), []byte("\n-5 -5\n  -5 a\n0 0\n,,,\n::\n1.5\n1.50\n01.5\nend without newline")...),
		[]byte("a:b:c:d:e\n:::\na\nA\n1\n-1\n1e2\n +1\n"),
		bytes.Repeat([]byte("dup 1\ndup 01\nDup 1\ndup 1\t\n"), 100),
	}
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
	_, err = Sort(t.Context(), Config{Memory: MinMemory, TempDir: tmp, testChunk: 1000}, ord, files, out)
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
	os.WriteFile(filepath.Join(in, "a"), genLines(5, 2000), 0o644)
	os.WriteFile(filepath.Join(out, "partition.0"), []byte("earlier\n"), 0o644)
	files, _, _ := extsort.ScanFiles([]string{in})
	ord, _ := NewOrder(Options{Keys: []string{"2,2n"}})
	ctx, cancel := context.WithCancel(t.Context())
	reads := 0
	cfg := Config{Memory: MinMemory, TempDir: tmp, testChunk: 2000, testFanIn: 2, Progress: func(p extsort.Phase, _ int64) {
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
		args := randomArgs(r)
		dir := t.TempDir()
		var paths []string
		for f := range 1 + r.IntN(3) {
			p := filepath.Join(dir, fmt.Sprintf("in-%d", f))
			os.WriteFile(p, randomLines(r), 0o644)
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

// randomArgs draws GNU sort arguments of the options linesort has.
func randomArgs(r *rand.Rand) []string {
	var a []string
	for _, g := range []string{"-b", "-d", "-f", "-i", "-n", "-r", "-s"} {
		if r.IntN(5) == 0 {
			a = append(a, g)
		}
	}
	if r.IntN(2) == 0 {
		a = append(a, "-t"+[]string{" ", "\t", ",", "-", ".", "0", "a", `\0`, "\xff"}[r.IntN(9)])
	}
	opts := func() string {
		var s []byte
		for range r.IntN(3) {
			s = append(s, "bdfinr"[r.IntN(6)])
		}
		return string(s)
	}
	for range r.IntN(3) {
		k := fmt.Sprint(1 + r.IntN(4))
		if r.IntN(2) == 0 {
			k += fmt.Sprint(".", 1+r.IntN(4))
		}
		k += opts()
		if r.IntN(3) > 0 {
			k += fmt.Sprint(",", 1+r.IntN(4))
			if r.IntN(2) == 0 {
				k += fmt.Sprint(".", r.IntN(5))
			}
			k += opts()
		}
		a = append(a, "-k"+k)
	}
	r.Shuffle(len(a), func(i, j int) { a[i], a[j] = a[j], a[i] })
	return a
}

// randomLines is up to 30 lines of up to 8 bytes, the last newline
// dropped one time in three.
func randomLines(r *rand.Rand) []byte {
	const alphabet = " \t,-.0123456789aA\x00\xff"
	var b []byte
	for range r.IntN(30) {
		for range r.IntN(9) {
			b = append(b, alphabet[r.IntN(len(alphabet))])
		}
		b = append(b, '\n')
	}
	if len(b) > 0 && r.IntN(3) == 0 {
		b = b[:len(b)-1]
	}
	return b
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
