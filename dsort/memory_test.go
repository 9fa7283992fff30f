package dsort

import (
	"testing"

	"github.com/gantryhq/gantry/extsort"
)

// A defaulted budget is divided among the machine's workers; one the user
// set is kept as given.
func TestWorkerSharesOnlyADefaultedBudget(t *testing.T) {
	base := WorkerConfig{Master: "127.0.0.1:1", Inputs: []string{t.TempDir()}, Output: t.TempDir()}

	w, err := NewWorker(base)
	if err != nil {
		t.Fatal(err)
	}
	whole := w.budget()
	w.shareMemory(4)
	if got, want := w.budget(), max(whole/4, extsort.MinMemory+runtimeReserve); got != want {
		t.Errorf("defaulted budget shared by 4: %d, want %d", got, want)
	}

	set := base
	set.Memory = 512 << 20
	w, err = NewWorker(set)
	if err != nil {
		t.Fatal(err)
	}
	w.shareMemory(4)
	if got := w.budget(); got != 512<<20 {
		t.Errorf("--memory 512MiB with 4 workers on the machine: budget %d, want it kept", got)
	}
}
