package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/record"
)

// TestSortLocalSIGKILLKeepsOldOutput: a sort SIGKILLed while it replaces an
// earlier output (nothing of it can run) leaves that output as it was and
// no complete-looking new output; the next run sweeps what the dead one
// left in the temp and output directories and commits its own output.
func TestSortLocalSIGKILLKeepsOldOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills gantry processes; skipped with -short")
	}
	root := t.TempDir()
	inA, inB := filepath.Join(root, "a"), filepath.Join(root, "b")
	out, tmp := filepath.Join(root, "out"), filepath.Join(root, "tmp")
	sortTestRecords(t, filepath.Join(inA, "data"), 0, 50000, record.GenOptions{})        // 5 MB
	sortTestRecords(t, filepath.Join(inB, "data"), 1000000, 600000, record.GenOptions{}) // 60 MB
	os.Mkdir(tmp, 0o755)
	bin := gantryBinary(t)

	if msg, err := exec.Command(bin, "sort", "local", "-q", "-I", inA, "-O", out, "--tmp", tmp).CombinedOutput(); err != nil {
		t.Fatalf("first sort: %v: %s", err, msg)
	}
	sumA := sortTestChecksum(t, inA)
	sortTestCheck(t, out, sumA)
	before := outputFiles(t, out)

	cmd := exec.Command(bin, "sort", "local", "-q", "-I", inB, "-O", out, "--tmp", tmp, "--memory", "16MiB")
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForSpill(t, cmd, tmp, stderr)
	cmd.Process.Kill() // SIGKILL: no deferred cleanup runs
	cmd.Wait()

	// The old output is untouched, file for file.
	if after := outputFiles(t, out); !equalFiles(before, after) {
		t.Fatalf("the killed sort changed the old output: %v, was %v", keys(after), keys(before))
	}
	stale, _ := filepath.Glob(filepath.Join(tmp, "gantry-sort-*"))
	staging, _ := filepath.Glob(filepath.Join(out, ".gantry-staging-*"))
	if len(stale) != 1 || len(staging) != 1 {
		t.Fatalf("after SIGKILL: %d spill dirs in --tmp and %d staging dirs in -O, want one of each (what the test checks is swept)", len(stale), len(staging))
	}

	// A new run sweeps the dead owner's directories and commits.
	msg, err := exec.Command(bin, "sort", "local", "-q", "-I", inB, "-O", out, "--tmp", tmp, "--memory", "16MiB").CombinedOutput()
	if err != nil {
		t.Fatalf("the run after the kill: %v: %s", err, msg)
	}
	sortTestCheck(t, out, sortTestChecksum(t, inB))
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("--tmp holds %d entries after the next run, want the dead sort's swept", len(ents))
	}
	for name := range outputFiles(t, out) {
		if !strings.HasPrefix(name, record.PartitionPrefix) {
			t.Errorf("-O holds %q after the next run", name)
		}
	}
}

// outputFiles maps each entry of dir to its contents ("" for directories).
func outputFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if e.IsDir() {
			if !strings.HasPrefix(e.Name(), ".gantry-staging-") {
				m[e.Name()] = ""
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

func equalFiles(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
