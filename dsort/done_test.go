package dsort

import (
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/record/recordtest"
)

// TestCompletedJobNeedsTheSameInputsAndOutput: a committed output counts as
// the completed result of its inputs only while the inputs print the same
// and every listed partition is there, alone, with its size.
func TestCompletedJobNeedsTheSameInputsAndOutput(t *testing.T) {
	root := t.TempDir()
	in, outDir := filepath.Join(root, "in"), filepath.Join(root, "out")
	var sum dataSum
	writeRecords(t, filepath.Join(in, "a"), 500, rand.New(rand.NewPCG(1, 1)), recordtest.Options{}, &sum)
	printOf := func() *inputPrint {
		inputs, _, err := extsort.ScanInputs([]string{in})
		if err != nil {
			t.Fatal(err)
		}
		p, err := printInputs(inputs)
		if err != nil {
			t.Fatal(err)
		}
		return p.withSample(inputs)
	}
	fp := printOf()
	o := output{dir: outDir, logger: slog.New(slog.DiscardHandler), clock: clock.Or(nil), inputs: fp}
	if err := o.prepare("", false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{4, 5} {
		testutil.WriteRecords(t, o.stagedPath("job1", p), make([]byte, 100*(p+1)))
	}
	if err := o.commit("job1", 2, fp); err != nil {
		t.Fatal(err)
	}
	if got := o.completedJob(fp); got != "job1" {
		t.Fatalf("completedJob = %q right after commit, want job1", got)
	}
	if got := o.completedJob(printOf()); got != "job1" {
		t.Fatalf("completedJob = %q with the inputs printed again, want job1", got)
	}
	part := filepath.Join(outDir, partitionName(5))
	steps := []struct {
		what       string
		change     func()
		undo       func()
		inputsSame bool
	}{
		{"a partition resized", func() { os.Truncate(part, 100) }, func() { os.Truncate(part, 600) }, true},
		{"a partition removed", func() { os.Rename(part, part+".x") }, func() { os.Rename(part+".x", part) }, true},
		{"an extra partition", func() { os.WriteFile(filepath.Join(outDir, partitionName(9)), nil, 0o644) },
			func() { os.Remove(filepath.Join(outDir, partitionName(9))) }, true},
		{"an input added", func() {
			writeRecords(t, filepath.Join(in, "b"), 1, rand.New(rand.NewPCG(2, 2)), recordtest.Options{}, &sum)
		}, func() { os.Remove(filepath.Join(in, "b")) }, false},
	}
	for _, s := range steps {
		s.change()
		if got := o.completedJob(printOf()); got != "" {
			t.Errorf("%s: completedJob = %q, want none", s.what, got)
		}
		s.undo()
		if got := o.completedJob(printOf()); got != "job1" {
			t.Fatalf("%s undone: completedJob = %q, want job1", s.what, got)
		}
	}
	// The sample alone: the same stat data, other keys.
	other := *fp
	other.Sample = "0" + fp.Sample[1:]
	if got := o.completedJob(&other); got != "" {
		t.Errorf("the same files, another sample: completedJob = %q, want none", got)
	}
	// An input rewritten in place with its size and times kept: the
	// change time and the sampled keys differ.
	a := filepath.Join(in, "a")
	fi, _ := os.Stat(a)
	data, _ := os.ReadFile(a)
	data[0] ^= 0xff
	if err := os.WriteFile(a, data, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(a, fi.ModTime(), fi.ModTime())
	if got := o.completedJob(printOf()); got != "" {
		t.Errorf("an input rewritten: completedJob = %q, want none", got)
	}
	// A marker without a print (written before prints existed) never
	// claims completion.
	noPrint := output{dir: filepath.Join(root, "old"), logger: o.logger, clock: o.clock}
	testutil.WriteRecords(t, noPrint.stagedPath("job0", 0), make([]byte, 100))
	if err := noPrint.commit("job0", 0, nil); err != nil {
		t.Fatal(err)
	}
	if got := noPrint.completedJob(nil); got != "" {
		t.Errorf("a marker without a print: completedJob = %q, want none", got)
	}
	if _, err := os.Stat(filepath.Join(outDir, record.DoneMarker)); err != nil {
		t.Fatal(err)
	}
}
