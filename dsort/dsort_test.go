package dsort

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/lifecycle"

	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/record/recordtest"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	testutil.RaiseParallel(waitingParallel)
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// dataSum is a multiset fingerprint of records: count and the 64-bit sum of
// their crc32s (valsort's checksum, truncated).
type dataSum struct {
	Records int64
	Sum     uint64
}

func (d *dataSum) add(rec []byte) {
	d.Records++
	d.Sum += uint64(crc32.ChecksumIEEE(rec))
}

// writeRecords writes n random records (recordtest.Random) to path
// and adds them to sum.
func writeRecords(t *testing.T, path string, n int, rng *rand.Rand, o recordtest.Options, sum *dataSum) {
	t.Helper()
	var buf []byte
	if n > 0 {
		buf = recordtest.Random(rng, n, o)
	}
	for off := 0; off < len(buf); off += record.Size {
		sum.add(buf[off : off+record.Size])
	}
	testutil.WriteRecords(t, path, buf)
}

// checkOutput reads every worker's output dir in worker order (registration
// order, found from the partition numbers) and checks
// that each holds only partition.<n> files, numbered consecutively across
// workers, and that their concatenation is sorted and has the input's
// records. It returns the bytes each worker received.
func checkOutput(t *testing.T, outDirs []string, want dataSum) []int64 {
	t.Helper()
	var (
		got     dataSum
		prev    []byte
		next    = 0
		perWork = make([]int64, len(outDirs))
	)
	type outDir struct {
		dir  string
		nums []int
	}
	var dirs []outDir
	for w, dir := range outDirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var nums []int
		for _, e := range ents {
			if e.Name() == record.DoneMarker {
				continue
			}
			n, ok := strings.CutPrefix(e.Name(), "partition.")
			k, err := strconv.Atoi(n)
			if !ok || err != nil {
				t.Fatalf("worker %d output holds %q, want only partition.<n>", w, e.Name())
			}
			nums = append(nums, k)
		}
		slices.Sort(nums)
		if len(nums) == 0 {
			t.Fatalf("worker %d wrote no partitions", w)
		}
		dirs = append(dirs, outDir{dir, nums})
	}
	slices.SortFunc(dirs, func(a, b outDir) int { return a.nums[0] - b.nums[0] })
	for w, d := range dirs {
		dir := d.dir
		for _, k := range d.nums {
			if k != next {
				t.Fatalf("worker %d: partition.%d, want partition.%d (consecutive numbering)", w, k, next)
			}
			next++
			data, err := os.ReadFile(filepath.Join(dir, "partition."+strconv.Itoa(k)))
			if err != nil {
				t.Fatal(err)
			}
			if len(data)%record.Size != 0 {
				t.Fatalf("partition.%d: %d bytes is not whole records", k, len(data))
			}
			perWork[w] += int64(len(data))
			for off := 0; off < len(data); off += record.Size {
				rec := data[off : off+record.Size]
				if prev != nil && bytes.Compare(prev, rec[:record.KeySize]) > 0 {
					t.Fatalf("partition.%d: record %d is out of order", k, off/record.Size)
				}
				prev = rec[:record.KeySize]
				got.add(rec)
			}
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("output records differ from input (-input +output):\n%s", d)
	}
	return perWork
}

// cluster is an in-process job: a master and workers as goroutines.
type cluster struct {
	addr      string // the master's
	master    *Master
	masterErr chan error
	workers   []*Worker
	workerErr []chan error
}

func startCluster(t *testing.T, ctx context.Context, mcfg MasterConfig, wcfgs []WorkerConfig) *cluster {
	t.Helper()
	addrCh := make(chan string, 1)
	mcfg.OnListen = func(a string) { addrCh <- a }
	mcfg.Addr = "127.0.0.1:0"
	m, err := NewMaster(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{master: m, masterErr: make(chan error, 1)}
	go func() { c.masterErr <- m.Run(ctx) }()
	select {
	case c.addr = <-addrCh:
	case <-time.After(10 * time.Second):
		t.Fatal("master did not listen")
	}
	for _, wc := range wcfgs {
		c.startWorker(t, ctx, wc)
	}
	return c
}

// startWorker starts one more worker of the job (wc.Master defaults to the
// master's address) under ctx and returns it and its Run's result.
func (c *cluster) startWorker(t *testing.T, ctx context.Context, wc WorkerConfig) (*Worker, <-chan error) {
	t.Helper()
	if wc.Master == "" {
		wc.Master = c.addr
	}
	wc.Bind = "127.0.0.1"
	w, err := NewWorker(wc)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	c.workers = append(c.workers, w)
	c.workerErr = append(c.workerErr, ch)
	go func() { ch <- w.Run(ctx) }()
	return w, ch
}

func (c *cluster) wait(t *testing.T) (workers []error, master error) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	select {
	case master = <-c.masterErr:
	case <-timeout:
		t.Fatal("master did not finish")
	}
	for i, ch := range c.workerErr {
		select {
		case err := <-ch:
			workers = append(workers, err)
		case <-timeout:
			t.Fatalf("worker %d did not finish", i)
		}
	}
	return workers, master
}

// mustSucceed waits for the job and fails the test unless the master and
// every worker returned nil.
func (c *cluster) mustSucceed(t *testing.T) {
	t.Helper()
	werrs, merr := c.wait(t)
	if merr != nil {
		t.Fatalf("master: %v", merr)
	}
	for i, err := range werrs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
}

// TestInProcessJob runs a master and three workers in this process on
// binary and ASCII data, with several input dirs, tiny and empty files,
// once with each worker's sorted input kept in memory (what a worker whose
// input fits half its budget does) and once with it spilled as runs. Each
// worker goes through the seed's states in order, each with its reason.
func TestInProcessJob(t *testing.T) {
	t.Run("kept", testInProcessJob)
	t.Run("spilled", func(t *testing.T) {
		neverKeep = true
		defer func() { neverKeep = false }()
		testInProcessJob(t)
	})
}

func testInProcessJob(t *testing.T) {
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	var sum dataSum
	var wcfgs []WorkerConfig
	var outs []string
	for w := range 3 {
		in1 := filepath.Join(root, fmt.Sprint("w", w), "in1")
		in2 := filepath.Join(root, fmt.Sprint("w", w), "in2")
		writeRecords(t, filepath.Join(in1, "a"), 3000+w*500, rng, recordtest.Options{}, &sum)
		writeRecords(t, filepath.Join(in1, "b.txt"), 2000, rng, recordtest.Options{ASCII: true}, &sum)
		writeRecords(t, filepath.Join(in2, "tiny"), 1, rng, recordtest.Options{}, &sum)
		writeRecords(t, filepath.Join(in2, "empty"), 0, rng, recordtest.Options{}, &sum)
		out := filepath.Join(root, fmt.Sprint("w", w), "out")
		outs = append(outs, out)
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{in1, in2}, Output: out, Memory: 32 << 20,
			TempDir: filepath.Join(root, fmt.Sprint("w", w), "tmp")})
	}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 3, HeartbeatInterval: 100 * time.Millisecond}, wcfgs)
	c.mustSucceed(t)
	checkOutput(t, outs, sum)
	for w := range 3 {
		ents, _ := os.ReadDir(filepath.Join(root, fmt.Sprint("w", w), "tmp"))
		if len(ents) != 0 {
			t.Errorf("worker %d left %d entries in its temp dir", w, len(ents))
		}
		wantSeedFlow(t, w, c.workers[w].StateMachine().History())
	}
}

// wantSeedFlow checks a completed worker's history: seed 000 §5.1's
// transition at each phase, in order, each with its reason.
func wantSeedFlow(t *testing.T, w int, h []lifecycle.Transition[State]) {
	t.Helper()
	var got []State
	for i, tr := range h {
		if tr.Reason == "" || i > 0 && tr.From != h[i-1].To {
			t.Errorf("worker %d: transition %d %s -> %s has no reason or does not follow the one before", w, i, tr.From, tr.To)
		}
		got = append(got, tr.To)
	}
	want := []State{Sampling, WaitingForPartitionConfig, Sorting, WaitingForShuffleSignal, Shuffling, WaitingForMergeSignal, Merging, Completed}
	if len(h) == 0 || h[0].From != Initializing || !slices.Equal(got, want) {
		t.Errorf("worker %d went through %v, want Initializing then %v", w, got, want)
	}
}

// TestSkewBalance: 90% of all records share one key; boundaries that split
// runs of equal keys keep every worker within 1.5x of the mean.
func TestSkewBalance(t *testing.T) {
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	var sum dataSum
	var wcfgs []WorkerConfig
	var outs []string
	hot := []byte("HOTKEY0000")
	for w := range 3 {
		in := filepath.Join(root, fmt.Sprint("w", w), "in")
		writeRecords(t, filepath.Join(in, "a"), 8000, rng, recordtest.Options{HotKey: hot, HotShare: 0.9}, &sum)
		out := filepath.Join(root, fmt.Sprint("w", w), "out")
		outs = append(outs, out)
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{in}, Output: out, Memory: 32 << 20,
			TempDir: filepath.Join(root, fmt.Sprint("w", w), "tmp")})
	}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 3, HeartbeatInterval: 100 * time.Millisecond}, wcfgs)
	werrs, merr := c.wait(t)
	if merr != nil || errors.Join(werrs...) != nil {
		t.Fatalf("master: %v, workers: %v", merr, werrs)
	}
	per := checkOutput(t, outs, sum)
	mean := float64(sum.Records*record.Size) / 3
	for w, n := range per {
		if float64(n) > 1.5*mean {
			t.Errorf("worker %d received %d bytes, more than 1.5x the mean %.0f (all: %v)", w, n, mean, per)
		}
	}
	t.Logf("bytes per worker: %v (mean %.0f)", per, mean)
}

// TestEmptyInputs: workers without records still finish, each with its
// (empty) partition files, and the job succeeds.
func TestEmptyInputs(t *testing.T) {
	root := t.TempDir()
	var wcfgs []WorkerConfig
	var outs []string
	for w := range 2 {
		in := filepath.Join(root, fmt.Sprint("w", w), "in")
		var sum dataSum
		writeRecords(t, filepath.Join(in, "empty"), 0, nil, recordtest.Options{}, &sum)
		out := filepath.Join(root, fmt.Sprint("w", w), "out")
		outs = append(outs, out)
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{in}, Output: out, Memory: 32 << 20,
			TempDir: filepath.Join(root, fmt.Sprint("w", w), "tmp")})
	}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 2, HeartbeatInterval: 100 * time.Millisecond}, wcfgs)
	werrs, merr := c.wait(t)
	if merr != nil || errors.Join(werrs...) != nil {
		t.Fatalf("master: %v, workers: %v", merr, werrs)
	}
	checkOutput(t, outs, dataSum{})
}
