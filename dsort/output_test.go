package dsort

import (
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/record/recordtest"
)

// TestTwoWorkersGivenOneOutputDirFail: two workers of a job given one
// local -O (each commit deletes the partitions that are not its own, and
// each start the staged ones) — the second to take the dir finds it locked
// and fails saying so, at once: the job fails with that reason, and what
// the dir held (a finished job's partition) is left as it was.
func TestTwoWorkersGivenOneOutputDirFail(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	before := []byte("a finished job's partition")
	if err := os.WriteFile(filepath.Join(out, "partition.0"), before, 0o644); err != nil {
		t.Fatal(err)
	}
	rng := mrand.New(mrand.NewPCG(13, 14))
	var wcfgs []WorkerConfig
	for w := range 2 {
		in := filepath.Join(root, fmt.Sprint("in", w))
		if err := os.MkdirAll(in, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(in, "f"), recordtest.Random(rng, 1000, recordtest.Options{}), 0o644); err != nil {
			t.Fatal(err)
		}
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{in}, Output: out, Memory: 32 << 20, TempDir: filepath.Join(root, fmt.Sprint("tmp", w))})
	}
	start := time.Now()
	c := startCluster(t, t.Context(), MasterConfig{Workers: 2, HeartbeatInterval: 100 * time.Millisecond}, wcfgs)
	werrs, merr := c.wait(t)
	if merr == nil || !strings.Contains(merr.Error(), "another process is writing partitions to the output dir") {
		t.Fatalf("the job ended with %v, want it failed for the shared output dir (workers: %v)", merr, werrs)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the job took %v to fail, want it at once", took)
	}
	if got, err := os.ReadFile(filepath.Join(out, "partition.0")); err != nil || !bytes.Equal(got, before) {
		t.Fatalf("partition.0 after the failed job: %q, %v; want it as it was", got, err)
	}
}
