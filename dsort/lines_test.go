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

	"github.com/gantryhq/gantry/linesort"
	"github.com/gantryhq/gantry/linesort/linetest"
	"github.com/gantryhq/gantry/record"
)

// linesJob runs a job of len(inputs) in-process workers sorting lines by
// args, worker w's input dir holding the files inputs[w] (named in order),
// and returns the partitions read in order and GNU sort's output for every
// file, worker 0's first, with the same arguments.
func linesJob(t *testing.T, args []string, inputs [][][]byte, mcfg MasterConfig) (got, want []byte) {
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
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{in}, Output: out, Memory: 32 << 20, Lines: &o,
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
			got, want := linesJob(t, args, inputs, MasterConfig{PartitionSize: 16 << 10})
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
			for w := range j.workers {
				if w == victim {
					j.startWorker(w, "GANTRY_DSORT_FAULT="+c.points)
				} else {
					j.startWorker(w)
				}
			}
			v := j.workers[victim].proc
			for p := range strings.SplitSeq(c.points, ",") {
				v.waitLine(false, regexp.MustCompile(`fault point `+p+` reached`), time.Minute)
			}
			v.waitLine(false, regexp.MustCompile(`-> `+c.want+`:`), time.Second)
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
