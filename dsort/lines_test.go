package dsort

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/linesort"
	"github.com/gantryhq/gantry/linesort/linetest"
	"github.com/gantryhq/gantry/record"
)

// linesJob runs a job of len(inputs) in-process workers sorting lines by
// args, each sampling sample lines (0: the default), worker w's input dir
// holding the files inputs[w] (named in order),
// and returns the partitions read in order and GNU sort's output for every
// file, worker 0's first, with the same arguments.
func linesJob(t *testing.T, args []string, inputs [][][]byte, mcfg MasterConfig, sample int) (got, want []byte) {
	t.Helper()
	o, err := linesort.ParseArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	var wcfgs []WorkerConfig
	var outs []string
	paths := make([][]string, len(inputs)) // worker w's files
	for w, files := range inputs {
		in := filepath.Join(root, fmt.Sprint("w", w), "in")
		os.MkdirAll(in, 0o755)
		for i, b := range files {
			p := filepath.Join(in, fmt.Sprintf("f%02d", i))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			paths[w] = append(paths[w], p)
		}
		out := filepath.Join(root, fmt.Sprint("w", w), "out")
		outs = append(outs, out)
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{in}, Output: out, Memory: 32 << 20, Lines: &o, SampleSize: sample,
			TempDir: filepath.Join(root, fmt.Sprint("w", w), "tmp")})
	}
	mcfg.Workers, mcfg.Lines = len(inputs), &o
	mcfg.HeartbeatInterval = 100 * time.Millisecond
	c := startCluster(t, t.Context(), mcfg, wcfgs)
	c.mustSucceed(t)
	gnu, err := exec.LookPath("sort")
	if err != nil {
		t.Fatal(err)
	}
	// The job's input order (what -s keeps) is its workers' in index
	// order, which is the order they registered in.
	var all []string
	for i := range inputs {
		for w, wk := range c.workers {
			if wk.assigned().index == i {
				all = append(all, paths[w]...)
			}
		}
	}
	return readPartitions(t, outs), linetest.GNUSort(t, gnu, args, all)
}

// readPartitions concatenates partition.0, partition.1, … wherever in
// outs each one is.
func readPartitions(t *testing.T, outs []string) []byte {
	t.Helper()
	var got []byte
	for p := 0; ; p++ {
		found := false
		for _, o := range outs {
			b, err := os.ReadFile(filepath.Join(o, record.PartitionPrefix+fmt.Sprint(p)))
			if err == nil {
				got, found = append(got, b...), true
				break
			}
		}
		if !found {
			return got
		}
	}
}

// TestLinesJobIsGNUSort: a job of three workers sorting lines writes, its
// partitions read in order, byte for byte what `LC_ALL=C sort` writes for
// all the workers' inputs (worker 0's first) with the same options, for
// every ordering of linetest.Cases: generated lines on worker 0,
// adversarial ones (empty lines and files, no final newline, CRLF, NUL,
// 0xff, a 3,000-byte line, missing fields) on worker 1, duplicate-heavy
// ones on worker 2 (equal keys cut across partitions by rank). Every other
// case spills each worker's input as runs of 4 KiB, so that boundaries cut
// many runs and ranks of equal keys add up across them.
func TestLinesJobIsGNUSort(t *testing.T) {
	inputs := [][][]byte{
		{linetest.Generated(1, 1500), linetest.Generated(2, 800)},
		linetest.Adversarial(),
		{linetest.Duplicates(3, 2500)},
	}
	for i, args := range linetest.Cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if i%2 == 1 {
				testLineChunk = 4096
				defer func() { testLineChunk = 0 }()
			}
			got, want := linesJob(t, args, inputs, MasterConfig{PartitionSize: 16 << 10}, 0)
			if !bytes.Equal(got, want) {
				t.Fatalf("%q: the job's output (%d bytes) differs from GNU sort's (%d bytes): %s", args, len(got), len(want), firstLineDiff(got, want))
			}
		})
	}
}

func firstLineDiff(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := range min(len(g), len(w)) {
		if !bytes.Equal(g[i], w[i]) {
			lo := max(0, i-2)
			return fmt.Sprintf("line %d: got %q, want %q", i, g[lo:min(i+3, len(g))], w[lo:min(i+3, len(w))])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(g), len(w))
}

// TestWorkerOfAnotherFormatIsRefused: a worker that sorts gensort records,
// or lines by other options, cannot join a job that sorts lines: its
// registration is refused, naming both, and it exits with that error.
func TestWorkerOfAnotherFormatIsRefused(t *testing.T) {
	job := linesort.Options{Separator: ",", Keys: []string{"3,3n"}}
	other := linesort.Options{Keys: []string{"3,3n"}}
	for _, tc := range []struct {
		lines *linesort.Options
		want  string
	}{
		{nil, "this job sorts --format lines -t \",\" -k 3,3n; the worker sorts gensort records"},
		{&other, "the worker sorts --format lines -k 3,3n"},
	} {
		root := t.TempDir()
		in := filepath.Join(root, "in")
		os.Mkdir(in, 0o755)
		os.WriteFile(filepath.Join(in, "a"), []byte(strings.Repeat("a,b,1", 19)+"abcd\n"), 0o644) // 100 bytes: a record too
		c := startCluster(t, t.Context(), MasterConfig{Workers: 1, Lines: &job, RegisterTimeout: 5 * time.Second}, nil)
		_, errc := c.startWorker(t, t.Context(), WorkerConfig{Inputs: []string{in}, Output: filepath.Join(root, "out"),
			TempDir: root, Memory: 32 << 20, Lines: tc.lines, RegisterTimeout: 5 * time.Second})
		select {
		case err := <-errc:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("worker of %v: err = %v, want it to say %q", tc.lines, err, tc.want)
			}
		case <-time.After(time.Minute):
			t.Fatal("the worker of another format was not refused")
		}
		if _, err := os.Stat(filepath.Join(root, "out")); err == nil {
			t.Error("the refused worker created its output directory")
		}
	}
}

// TestLinesJobSurvivesAKilledWorker: a job of three worker processes
// sorting lines, whose worker 1 is killed (SIGKILL) mid-shuffle — after its
// first piece, its streams to peers stopped before their last chunk — or
// after its first merged partition, and restarted with its temp dir wiped,
// still writes exactly GNU sort's output.
func TestLinesJobSurvivesAKilledWorker(t *testing.T) {
	t.Parallel() // waits on killed and restarted workers (main_test.go)
	keys := []string{"--format", "lines", "-t", ",", "-k", "2,2", "-k", "3,3nr"}
	for _, c := range []struct{ phase, points, want string }{
		{"shuffling", "shuffle-piece,serve-last-chunk", "Shuffling"},
		{"merging", "merge-partition", "Merging"},
	} {
		t.Run(c.phase, func(t *testing.T) {
			needBinary(t)
			j := &job{t: t, root: t.TempDir()}
			var files [][]string // worker w's input files
			for w := range 3 {
				in := filepath.Join(j.root, fmt.Sprint("w", w), "in")
				os.MkdirAll(in, 0o755)
				var fs []string
				for i, b := range [][]byte{csvLines(uint64(w), 20000), linetest.Duplicates(uint64(w), 3000)} {
					p := filepath.Join(in, fmt.Sprintf("f%d", i))
					if err := os.WriteFile(p, b, 0o644); err != nil {
						t.Fatal(err)
					}
					fs = append(fs, p)
				}
				files = append(files, fs)
				j.workers = append(j.workers, &workerSpec{bind: fmt.Sprintf("127.0.0.%d", w+2), inputs: []string{in},
					out: filepath.Join(j.root, fmt.Sprint("w", w), "out"), tmp: filepath.Join(j.root, fmt.Sprint("w", w), "tmp"), extra: keys})
			}
			j.master = startProc(t, "master", nil, append([]string{"sort", "master", "3", "--heartbeat", "200ms", "--partition-size", "64KiB"}, keys...)...)
			j.addr = j.master.waitLine(true, regexp.MustCompile(`^\S+:\d+$`), 30*time.Second).text
			const victim = 1
			v := j.startStopping(victim, c.points, c.want)
			if err := v.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			v.wait(10 * time.Second)
			if err := os.RemoveAll(j.workers[victim].tmp); err != nil {
				t.Fatal(err)
			}
			j.startWorker(victim)
			order := j.workerOrder()
			if code := j.master.wait(2 * time.Minute); code != 0 {
				t.Fatalf("master exited %d", code)
			}
			var outs, all []string
			for _, ws := range order {
				outs = append(outs, ws.out)
				all = append(all, files[slices.Index(j.workers, ws)]...)
			}
			for i, w := range j.workers {
				if code := w.proc.wait(30 * time.Second); code != 0 {
					t.Fatalf("worker %d exited %d", i, code)
				}
			}
			gnu, err := exec.LookPath("sort")
			if err != nil {
				t.Fatal(err)
			}
			got, want := readPartitions(t, outs), linetest.GNUSort(t, gnu, []string{"-t,", "-k2,2", "-k3,3nr"}, all)
			if !bytes.Equal(got, want) {
				t.Fatalf("after a worker was killed while %s: the job's output differs from GNU sort's: %s", c.phase, firstLineDiff(got, want))
			}
		})
	}
}

// csvLines is n lines of three comma-separated fields: a word from a few
// dozen (so keys repeat), a number, an id.
func csvLines(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 99))
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "%d,w%02d,%d,%d\n", seed, r.IntN(40), r.IntN(1000)-500, i)
	}
	return b.Bytes()
}

// TestLineLongerThanTheBudgetFailsTheJob: a line longer than a worker's
// chunk (two fifths of its sort share) fails that worker, saying so and
// what to raise, and the job with it; no partition is written.
func TestLineLongerThanTheBudgetFailsTheJob(t *testing.T) {
	root := t.TempDir()
	o := linesort.Options{Keys: []string{"1,1"}}
	var wcfgs []WorkerConfig
	for w := range 2 {
		in := filepath.Join(root, fmt.Sprint("in", w))
		os.MkdirAll(in, 0o755)
		data := []byte("a\nb\n")
		if w == 1 {
			data = append(data, bytes.Repeat([]byte("x"), 8<<20)...) // 8 MiB: over 2/5 of the 16 MiB sort share
		}
		if err := os.WriteFile(filepath.Join(in, "f"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{in}, Output: filepath.Join(root, fmt.Sprint("out", w)),
			TempDir: filepath.Join(root, fmt.Sprint("tmp", w)), Memory: 32 << 20, Lines: &o})
	}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 2, Lines: &o, HeartbeatInterval: 100 * time.Millisecond}, wcfgs)
	werrs, merr := c.wait(t)
	if merr == nil {
		t.Fatal("the job succeeded")
	}
	var said bool
	for _, err := range werrs {
		said = said || err != nil && strings.Contains(err.Error(), "a line of more than") && strings.Contains(err.Error(), "raise --memory")
	}
	if !said {
		t.Fatalf("no worker said the line is too long: workers %v, master %v", werrs, merr)
	}
	if got := readPartitions(t, []string{filepath.Join(root, "out0"), filepath.Join(root, "out1")}); len(got) != 0 {
		t.Errorf("a failed job left %d bytes of partitions", len(got))
	}
}

// TestLinesJobOnFewSamplesAndOddFiles: fewer samples than partitions (so
// boundaries repeat or are missing), a worker whose input is one 20 KB line
// with no newline, empty files, files of newlines only, long duplicate
// lines and a worker of nothing: still GNU sort's output.
func TestLinesJobOnFewSamplesAndOddFiles(t *testing.T) {
	dups := bytes.Repeat([]byte("k 1\nk 1\nk 2\n"), 3000)
	longDups := bytes.Repeat(append(bytes.Repeat([]byte("L"), 5000), '\n'), 40)
	inputs := [][][]byte{
		{bytes.Repeat([]byte("h"), 20000)},
		{{}, []byte("\n"), []byte("\n\n\n"), dups},
		{longDups, dups, []byte("k")},
		{{}},
	}
	for _, sample := range []int{1, 7} {
		for _, args := range [][]string{{}, {"-s", "-k1,1"}, {"-r", "-k2,2n"}} {
			t.Run(fmt.Sprint(sample, " ", strings.Join(args, " ")), func(t *testing.T) {
				if sample == 7 {
					testLineChunk = 32 << 10
					defer func() { testLineChunk = 0 }()
				}
				got, want := linesJob(t, args, inputs, MasterConfig{PartitionSize: 8 << 10}, sample)
				if !bytes.Equal(got, want) {
					t.Fatalf("%q: differs from GNU sort (%d vs %d bytes): %s", args, len(got), len(want), firstLineDiff(got, want))
				}
			})
		}
	}
}

// TestLinesSampleFitsAMessage: 10,000 sampled lines of 450 bytes (4.5 MB of
// full keys) once overflowed gRPC's 4 MiB message and failed the job at
// sampling; keys are cut to maxSampleKey bytes, a valid split point still.
func TestLinesSampleFitsAMessage(t *testing.T) {
	var b bytes.Buffer
	for i := range 20000 {
		fmt.Fprintf(&b, "%08d %s\n", (i*7919)%20000, strings.Repeat("x", 440))
	}
	got, want := linesJob(t, nil, [][][]byte{{b.Bytes()}, {b.Bytes()}}, MasterConfig{}, 0)
	if !bytes.Equal(got, want) {
		t.Fatalf("differs from GNU sort: %s", firstLineDiff(got, want))
	}
}

// TestSampleLinesOfAHugeLine: draws falling in one 8 MiB line read it once,
// not once per draw (this took 5 s and more with the line's square), take
// that line as often as its length says, and the estimate of the lines
// stays near the truth (it said 4 million for 3).
func TestSampleLinesOfAHugeLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	data := append(bytes.Repeat([]byte("h"), 8<<20), "\na\nb\n"...)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ord, _ := linesort.NewOrder(linesort.Options{})
	keys, lines, err := sampleLines(ord, []extsort.Input{{Path: p, Size: int64(len(data))}}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := splitSample(true, keys)
	if err != nil {
		t.Fatal(err)
	}
	huge := ord.AppendFullKey(nil, data[:8<<20])[:maxSampleKey]
	n := 0
	for _, k := range ks {
		if bytes.Equal(k, huge) {
			n++
		}
	}
	if len(ks) != 10000 || n < 9990 {
		t.Errorf("%d keys, %d of them the huge line's; want 10000, nearly all", len(ks), n)
	}
	if lines < 1 || lines > 10 {
		t.Errorf("estimated %d lines, want about 3", lines)
	}
}

// TestLineCutsOfOneKeyGoOn: boundaries that share a key cut a run of that
// key's lines at their ranks, less the lines of earlier runs, each going on
// from the last (a dominant key once had every boundary count its lines
// from the start again: 50 boundaries over a 64 MiB run took 4 s); the
// other workers' boundaries take all of them or none.
func TestLineCutsOfOneKeyGoOn(t *testing.T) {
	ord, _ := linesort.NewOrder(linesort.Options{})
	line := []byte("GET /index.html\n") // 16 bytes
	dir := t.TempDir()
	var runs []extsort.Run
	for r, n := range []int{1000, 200000} {
		p := filepath.Join(dir, fmt.Sprint("run", r))
		data := slices.Concat([]byte("A\n"), bytes.Repeat(line, n), []byte("Z\n"))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, extsort.Run{Path: p})
	}
	key := ord.AppendFullKey(nil, line[:len(line)-1])
	counts := []int64{0, 500, 999, 1000, 1001, 5000, 5000, 150000, 201000, 300000}
	var bounds []Boundary
	for _, c := range counts {
		bounds = append(bounds, Boundary{Key: key, Worker: 1, Count: c})
	}
	bounds = append(bounds, Boundary{Key: key, Worker: 2}) // worker 1 < 2: all its lines of the key before
	splits, err := lineSplits(ord, runs, bounds, 1)
	if err != nil {
		t.Fatal(err)
	}
	for r, n := range []int64{1000, 200000} {
		before := int64(0) // lines of the key in earlier runs
		if r == 1 {
			before = 1000
		}
		for b, c := range counts {
			in := min(max(c-before, 0), n) // this run's lines of the key before the cut
			if want := 2 + 16*in; splits[r][b+1] != want {
				t.Errorf("run %d, boundary at rank %d: cut at %d, want %d", r, c, splits[r][b+1], want)
			}
		}
		if want := 2 + 16*n; splits[r][len(counts)+1] != want {
			t.Errorf("run %d, worker 2's boundary: cut at %d, want %d", r, splits[r][len(counts)+1], want)
		}
	}
	// Worker 0 and worker 3 see worker 1's boundaries as all or nothing.
	for self, want := range map[int]int64{0: 2 + 16*1000, 3: 2} {
		s, err := lineSplits(ord, runs[:1], bounds[:1], self)
		if err != nil || s[0][1] != want {
			t.Errorf("worker %d: cut at %v (%v), want %d", self, s, err, want)
		}
	}
}

// TestCompletedOutputOfOtherOptionsIsNotDone: a worker re-run over the
// committed output of its inputs with no master listening says "already
// completed" only if it sorts as that job did: with other keys, or
// gensort, it has something to do (it once exited 0 leaving the old
// order).
func TestCompletedOutputOfOtherOptionsIsNotDone(t *testing.T) {
	root := t.TempDir()
	in, out := filepath.Join(root, "in"), filepath.Join(root, "out")
	os.MkdirAll(in, 0o755)
	var b bytes.Buffer
	for i := range 3000 { // 10 bytes a line: whole gensort records too
		fmt.Fprintf(&b, "%04d %04d\n", i, 3000-i)
	}
	if err := os.WriteFile(filepath.Join(in, "f"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	k1 := linesort.Options{Keys: []string{"1,1"}}
	wc := WorkerConfig{Inputs: []string{in}, Output: out, Memory: 32 << 20, Lines: &k1, TempDir: filepath.Join(root, "tmp")}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 1, Lines: &k1, HeartbeatInterval: 100 * time.Millisecond}, []WorkerConfig{wc})
	c.mustSucceed(t)
	for _, tc := range []struct {
		lines *linesort.Options
		done  bool
	}{{&k1, true}, {&linesort.Options{Keys: []string{"2,2"}}, false}, {nil, false}} {
		wc.Lines, wc.Master, wc.RegisterTimeout = tc.lines, "127.0.0.1:1", time.Second // nobody listens
		w, err := NewWorker(wc)
		if err != nil {
			t.Fatal(err)
		}
		err = w.Run(t.Context())
		if done := w.AlreadyCompleted() != ""; done != tc.done || done != (err == nil) {
			t.Errorf("a worker sorting %s over the output of -k1,1: already completed %v (err %v), want %v",
				describeFormat(formatSpec(tc.lines)), done, err, tc.done)
		}
	}
}

// TestMasterResumesOnlyItsOwnFormat: a master restarted with --state and
// other ordering options (or none) than the saved job's refuses to resume
// it, naming both; the boundaries it holds cut lines of the saved order.
func TestMasterResumesOnlyItsOwnFormat(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	k1 := linesort.Options{Keys: []string{"1,1"}}
	if err := os.WriteFile(state, []byte(`{"job_id":"j1","workers":1,"format":"`+formatSpec(&k1)+`","phase":1,"members":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lines *linesort.Options
		want  string
	}{
		{nil, "sorts --format lines -k 1,1, not gensort records"},
		{&linesort.Options{Keys: []string{"2,2"}}, "sorts --format lines -k 1,1, not --format lines -k 2,2"},
	} {
		m, err := NewMaster(MasterConfig{Workers: 1, StateFile: state, Lines: tc.lines})
		if err == nil {
			err = m.Run(t.Context())
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("master of %s on the state of -k 1,1: err = %v, want it to say %q", describeFormat(formatSpec(tc.lines)), err, tc.want)
		}
	}
}

// TestRandomOptionsJobIsGNUSort: 24 jobs of 3 workers, each with random
// GNU sort options (linetest.RandomArgs: separators, keys with characters
// and options of their own, every global option) over random lines of an
// adversarial alphabet (blanks, NUL, 0xff, signs and digits; a final
// newline now and then missing), a few dozen partitions of a few lines,
// every other job spilled as tiny runs: each writes GNU sort's output.
func TestRandomOptionsJobIsGNUSort(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 2))
	for it := 0; it < 24; {
		args := linetest.RandomArgs(r)
		o, err := linesort.ParseArgs(args)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := linesort.NewOrder(o); err != nil {
			continue // GNU sort refuses it too (TestRandomOptionsMatchGNUSort)
		}
		inputs := make([][][]byte, 3)
		for w := range inputs {
			for range 1 + r.IntN(3) {
				var b []byte
				for range 1 + r.IntN(8) {
					b = append(b, linetest.RandomLines(r)...)
					if len(b) > 0 && b[len(b)-1] != '\n' {
						b = append(b, '\n')
					}
				}
				inputs[w] = append(inputs[w], b)
			}
		}
		t.Run(fmt.Sprint(it, " ", strings.Join(args, " ")), func(t *testing.T) {
			if it%2 == 1 {
				testLineChunk = 256
				defer func() { testLineChunk = 0 }()
			}
			got, want := linesJob(t, args, inputs, MasterConfig{PartitionSize: 64}, 50)
			if !bytes.Equal(got, want) {
				t.Fatalf("%q: the job's output differs from GNU sort's: %s", args, firstLineDiff(got, want))
			}
		})
		it++
	}
}
