package dsort

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/extsort"
)

// makeRecords returns n random records; share of them carry hot's key.
func makeRecords(rng *rand.Rand, n int, hot []byte, share float64) []byte {
	buf := make([]byte, n*recSize)
	for i := range n {
		rec := buf[i*recSize : (i+1)*recSize]
		for j := range rec {
			rec[j] = byte(rng.Uint32())
		}
		if hot != nil && rng.Float64() < share {
			copy(rec, hot)
		}
	}
	return buf
}

// writeRuns cuts data into runs of at most runRecords records, sorts each
// stably by key and writes them to dir.
func writeRuns(t *testing.T, dir string, data []byte, runRecords int) []extsort.Run {
	t.Helper()
	var runs []extsort.Run
	for off, i := 0, 0; off < len(data); off, i = off+runRecords*recSize, i+1 {
		chunk := data[off:min(off+runRecords*recSize, len(data))]
		recs := make([][]byte, 0, len(chunk)/recSize)
		for o := 0; o < len(chunk); o += recSize {
			recs = append(recs, chunk[o:o+recSize])
		}
		slices.SortStableFunc(recs, func(a, b []byte) int { return bytes.Compare(a[:keySize], b[:keySize]) })
		path := filepath.Join(dir, fmt.Sprintf("run%d", i))
		if err := os.WriteFile(path, bytes.Join(recs, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, extsort.Run{Path: path, Records: int64(len(recs))})
	}
	return runs
}

// TestBoundariesSplitEqualKeys checks the composite boundaries end to end
// without the network: 90% of records share a key, the sample is small, and
// yet every worker's share stays within 1.5x of the mean; partitions are
// ordered; and the cut of a worker's data does not depend on how it was cut
// into runs (so a restarted worker reproduces it).
func TestBoundariesSplitEqualKeys(t *testing.T) {
	const workers, perWorker, ppw = 3, 20000, 2
	rng := rand.New(rand.NewPCG(7, 8))
	hot := []byte("0123456789")
	dir := t.TempDir()
	var keys [][]byte
	var recs []int64
	data := make([][]byte, workers)
	for w := range workers {
		data[w] = makeRecords(rng, perWorker, hot, 0.9)
		in := filepath.Join(dir, fmt.Sprint("in", w))
		if err := os.WriteFile(in, data[w], 0o644); err != nil {
			t.Fatal(err)
		}
		k, n, err := sampleInputs([]extsort.Input{{Path: in, Size: int64(len(data[w]))}}, 500)
		if err != nil {
			t.Fatal(err)
		}
		keys, recs = append(keys, k), append(recs, n)
	}
	bounds := computeBoundaries(keys, recs, workers*ppw)
	if len(bounds) != workers*ppw-1 {
		t.Fatalf("%d boundaries, want %d", len(bounds), workers*ppw-1)
	}
	for i := 1; i < len(bounds); i++ {
		if compareBoundaries(bounds[i-1], bounds[i]) > 0 {
			t.Fatalf("boundaries %d and %d out of order", i-1, i)
		}
	}
	perPart := make([]int64, workers*ppw)
	minKey := make([][]byte, workers*ppw)
	maxKey := make([][]byte, workers*ppw)
	for w := range workers {
		var cuts [][]int64 // per layout: records per partition
		for _, runRecords := range []int{perWorker, 3000, 7000} {
			rd := filepath.Join(dir, fmt.Sprintf("w%d-%d", w, runRecords))
			os.Mkdir(rd, 0o755)
			runs := writeRuns(t, rd, data[w], runRecords)
			splits, err := runSplits(runs, bounds, w)
			if err != nil {
				t.Fatal(err)
			}
			counts := make([]int64, workers*ppw)
			for r, s := range splits {
				for p := range counts {
					counts[p] += s[p+1] - s[p]
					if runRecords != perWorker || s[p+1] == s[p] {
						continue
					}
					f, _ := os.ReadFile(runs[r].Path)
					lo, hi := f[s[p]*recSize:][:keySize], f[(s[p+1]-1)*recSize:][:keySize]
					if minKey[p] == nil || bytes.Compare(lo, minKey[p]) < 0 {
						minKey[p] = lo
					}
					if maxKey[p] == nil || bytes.Compare(hi, maxKey[p]) > 0 {
						maxKey[p] = hi
					}
				}
			}
			cuts = append(cuts, counts)
		}
		for _, c := range cuts[1:] {
			if d := cmp.Diff(cuts[0], c); d != "" {
				t.Fatalf("worker %d: the cut depends on the run layout (-one run +several):\n%s", w, d)
			}
		}
		for p, n := range cuts[0] {
			perPart[p] += n
		}
	}
	for p := 1; p < len(perPart); p++ {
		if maxKey[p-1] != nil && minKey[p] != nil && bytes.Compare(maxKey[p-1], minKey[p]) > 0 {
			t.Fatalf("partition %d holds a key above partition %d's smallest", p-1, p)
		}
	}
	mean := float64(workers*perWorker) / workers
	for w := range workers {
		got := perPart[w*ppw] + perPart[w*ppw+1]
		if float64(got) > 1.5*mean {
			t.Errorf("worker %d gets %d records, more than 1.5x the mean %.0f (partitions %v)", w, got, mean, perPart)
		}
	}
	t.Logf("records per partition: %v", perPart)
}

// TestSampleSpreadsOverAllInput: the sample reaches every file, not only the
// head of the first one.
func TestSampleSpreadsOverAllInput(t *testing.T) {
	dir := t.TempDir()
	var inputs []extsort.Input
	for i := range 4 {
		rec := bytes.Repeat([]byte{byte('a' + i)}, recSize*250)
		path := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(path, rec, 0o644); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, extsort.Input{Path: path, Size: int64(len(rec))})
	}
	keys, n, err := sampleInputs(inputs, 8)
	if err != nil || n != 1000 {
		t.Fatalf("sampleInputs: %d records, %v", n, err)
	}
	var firsts []byte
	for i := 0; i < len(keys); i += keySize {
		firsts = append(firsts, keys[i])
	}
	if d := cmp.Diff("aabbccdd", string(firsts)); d != "" {
		t.Fatal(d)
	}
}

func TestChunkWriterCutsAtOneMiB(t *testing.T) {
	var sizes []int
	var offs []int64
	cw := &chunkWriter{buf: make([]byte, 0, chunkBytes), send: func(c *dsortpb.ShuffleDataChunk) error {
		sizes, offs = append(sizes, len(c.GetData())), append(offs, c.GetOffset())
		return nil
	}}
	data := make([]byte, 3*chunkBytes+5*recSize)
	for i := 0; i < len(data); i += 7 * recSize {
		cw.Write(data[i:min(i+7*recSize, len(data))])
	}
	cw.flush()
	if d := cmp.Diff([]int{chunkBytes, chunkBytes, chunkBytes, 5 * recSize}, sizes); d != "" {
		t.Fatal(d)
	}
	if d := cmp.Diff([]int64{0, chunkBytes, 2 * chunkBytes, 3 * chunkBytes}, offs); d != "" {
		t.Fatal(d)
	}
	if chunkBytes > 1<<20 || chunkBytes%recSize != 0 {
		t.Fatalf("chunkBytes = %d", chunkBytes)
	}
}

// startMaster runs a master on loopback and returns a client and a stop
// function that returns Run's error.
func startMaster(t *testing.T, cfg MasterConfig) (dsortpb.MasterClient, func() error) {
	t.Helper()
	addrCh := make(chan string, 1)
	cfg.Addr, cfg.OnListen = "127.0.0.1:0", func(a string) { addrCh <- a }
	cfg.ShutdownGrace = time.Millisecond
	m, err := NewMaster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	addr := <-addrCh
	cc, err := dial(addr, "")
	if err != nil {
		t.Fatal(err)
	}
	return dsortpb.NewMasterClient(cc), func() error {
		cancel()
		cc.Close()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("master did not stop")
			return nil
		}
	}
}

func TestMasterRefusesExtraWorkersButTakesBackKnownOnes(t *testing.T) {
	c, stop := startMaster(t, MasterConfig{Workers: 1})
	ctx := context.Background()
	reg := func(addr, out string) (*dsortpb.RegisterReply, error) {
		return c.RegisterWorker(ctx, &dsortpb.RegisterRequest{Address: addr, InputDirs: []string{"/in"}, OutputDir: out})
	}
	first, err := reg("127.0.0.2:1000", "/out")
	if err != nil || first.GetIndex() != 0 || first.GetEpoch() != 1 || !first.GetNeedSample() {
		t.Fatalf("first registration: %v, %v", first, err)
	}
	if _, err := reg("127.0.0.3:1000", "/out"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a registration beyond N: err = %v, want ResourceExhausted", err)
	}
	// Same host and dirs, new port: the worker restarted.
	again, err := reg("127.0.0.2:2000", "/out")
	if err != nil || again.GetIndex() != 0 || again.GetEpoch() != 2 {
		t.Fatalf("re-registration: %v, %v", again, err)
	}
	// The old process's heartbeats are told to stop.
	hb, err := c.Heartbeat(ctx, &dsortpb.HeartbeatRequest{JobId: first.GetJobId(), Index: 0, Epoch: 1})
	if err != nil || !hb.GetShouldAbort() {
		t.Fatalf("stale heartbeat: %v, %v", hb, err)
	}
	// Calls must carry the job's ID.
	_, err = c.SubmitSample(ctx, &dsortpb.SampleRequest{JobId: "other", Index: 0, Epoch: 2})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("wrong job ID: err = %v", err)
	}
	var ae *AbortError
	if err := stop(); !errors.As(err, &ae) || !errors.Is(err, ErrAborted) {
		t.Fatalf("Run after cancel = %v, want an AbortError", err)
	}
}

func TestTokenIsCheckedOnEveryCall(t *testing.T) {
	c, stop := startMaster(t, MasterConfig{Workers: 1, Token: "s3cret"})
	defer stop()
	ctx := context.Background()
	if _, err := c.GetJobStatus(ctx, &dsortpb.JobStatusRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: err = %v", err)
	}
	bad := metadata.AppendToOutgoingContext(ctx, tokenKey, "wrong")
	if _, err := c.GetJobStatus(bad, &dsortpb.JobStatusRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token: err = %v", err)
	}
	good := metadata.AppendToOutgoingContext(ctx, tokenKey, "s3cret")
	js, err := c.GetJobStatus(good, &dsortpb.JobStatusRequest{})
	if err != nil || js.GetNumWorkers() != 1 || js.GetPhase() != "registering" {
		t.Fatalf("right token: %v, %v", js, err)
	}
}

// Seed 000 §6.1: SetPartitionBoundaries is refused unless the worker waits
// for it.
func TestSetPartitionBoundariesOnlyWhenWaiting(t *testing.T) {
	w, err := NewWorker(WorkerConfig{Master: "127.0.0.1:1", Inputs: []string{"in"}, Output: "out", Memory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if w.sm, err = NewStateMachine("", nil, nil); err != nil {
		t.Fatal(err)
	}
	w.numWorkers, w.epoch = 2, 1
	r := &workerRPC{w: w}
	pc := &dsortpb.PartitionConfig{Epoch: 1, NumPartitions: 2, PartitionsPerWorker: 1,
		Boundaries: []*dsortpb.Boundary{{Key: make([]byte, keySize), Worker: 1}}}
	if _, err := r.SetPartitionBoundaries(context.Background(), pc); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("in Initializing: err = %v, want FailedPrecondition", err)
	}
	for _, s := range []State{Sampling, WaitingForPartitionConfig} {
		if err := w.sm.Transition(s, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// GetStatus reports the seed's §7 band for the waiting state.
	st, err := r.GetStatus(context.Background(), &dsortpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != dsortpb.WorkerState_WAITING_FOR_PARTITION_CONFIG || st.GetCurrentPhase() != dsortpb.Phase_PHASE_SAMPLING ||
		st.GetProgressPercentage() != 15 || st.GetMessage() != "Waiting for partition config" {
		t.Fatalf("GetStatus = %v", st)
	}
	bad := &dsortpb.PartitionConfig{Epoch: 1, NumPartitions: 3, PartitionsPerWorker: 1}
	if _, err := r.SetPartitionBoundaries(context.Background(), bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("inconsistent config: err = %v, want InvalidArgument", err)
	}
	if _, err := r.SetPartitionBoundaries(context.Background(), pc); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-w.cfgCh:
		if got != pc {
			t.Fatal("a different config was delivered")
		}
	default:
		t.Fatal("config not delivered")
	}
	if d := cmp.Diff([]Boundary{{Worker: 1}}, w.bounds); d != "" {
		t.Fatal(d)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []WorkerConfig{
		{Inputs: []string{"in"}, Output: "out"},
		{Master: "127.0.0.1:1", Output: "out"},
		{Master: "127.0.0.1:1", Inputs: []string{"in"}},
		{Master: "nohostport", Inputs: []string{"in"}, Output: "out"},
		{Master: "127.0.0.1:1", Inputs: []string{"in"}, Output: "out", Memory: 1 << 20},
	} {
		if _, err := NewWorker(c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewWorker(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if _, err := NewMaster(MasterConfig{}); !errors.Is(err, ErrConfig) {
		t.Errorf("NewMaster with 0 workers: err = %v", err)
	}
}

// FuzzIsPartitionName: the output cleaner removes only partition.<digits>
// names (never partition.3x, never another file).
func FuzzIsPartitionName(f *testing.F) {
	for _, s := range []string{"partition.0", "partition.30", "partition.", "partition.3x", "partition.-1", "data", "partition.99999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := isPartitionName(name)
		n, ok := strings.CutPrefix(name, "partition.")
		want := ok && n != ""
		for _, c := range n {
			want = want && c >= '0' && c <= '9'
		}
		if got != want {
			t.Fatalf("isPartitionName(%q) = %v, want %v", name, got, want)
		}
	})
}
