package dsort

import (
	"testing"

	"github.com/gantryhq/gantry/extsort"
	"github.com/google/go-cmp/cmp"
)

// A defaulted budget is divided among the machine's workers; one the user
// set is kept as given.
func TestWorkerSharesOnlyADefaultedBudget(t *testing.T) {
	base := WorkerConfig{Master: "127.0.0.1:1", Inputs: []string{t.TempDir()}, Output: t.TempDir()}

	w, err := NewWorker(base)
	if err != nil {
		t.Fatal(err)
	}
	whole := w.planMemory(1, 1).budget
	if got, want := w.planMemory(4, 1).budget, max(whole/4, extsort.MinMemory+runtimeReserve); got != want {
		t.Errorf("defaulted budget shared by 4: %d, want %d", got, want)
	}

	set := base
	set.Memory = 512 << 20
	w, err = NewWorker(set)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.planMemory(4, 1).budget; got != 512<<20 {
		t.Errorf("--memory 512MiB with 4 workers on the machine: budget %d, want it kept", got)
	}
}

func TestMemoryPlan(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name                  string
		budget                int64
		shared                bool
		onMachine, cores, ppw int
		records               int64
		want                  memoryPlan
	}{
		{"alone, 1 GiB, 4 cores, 8 partitions", 1024 * mib, true, 1, 4, 8, 0,
			memoryPlan{budget: 1024 * mib, sort: 1000 * mib, serve: 64 * mib, merge: 128 * mib}},
		{"a defaulted budget is shared by the machine's 4 workers", 1024 * mib, true, 4, 2, 2, 0,
			memoryPlan{budget: 256 * mib, sort: 232 * mib, serve: 32 * mib, merge: 64 * mib}},
		{"a budget the user set is not shared", 1024 * mib, false, 4, 2, 2, 0,
			memoryPlan{budget: 1024 * mib, sort: 1000 * mib, serve: 128 * mib, merge: 256 * mib}},
		{"sharing keeps what a sort needs", 64 * mib, true, 8, 1, 1, 0,
			memoryPlan{budget: 40 * mib, sort: 16 * mib, serve: 10 * mib, merge: 20 * mib}},
		{"merges run on at most ppw partitions at once", 512 * mib, false, 1, 8, 2, 0,
			memoryPlan{budget: 512 * mib, sort: 488 * mib, serve: 16 * mib, merge: 128 * mib}},
		{"tiny shares get the floor", 40 * mib, false, 1, 64, 64, 0,
			memoryPlan{budget: 40 * mib, sort: 16 * mib, serve: minMergeMemory, merge: minMergeMemory}},
		{"an input whose sorted form fits half the budget is kept, at half the serve and merge shares", 1024 * mib, false, 1, 2, 2, 4_000_000,
			memoryPlan{budget: 1024 * mib, sort: 1000 * mib, serve: 64 * mib, merge: 128 * mib, keep: true}},
		{"one that does not is spilled", 1024 * mib, false, 1, 2, 2, 5_000_000,
			memoryPlan{budget: 1024 * mib, sort: 1000 * mib, serve: 128 * mib, merge: 256 * mib}},
		{"the kept size is checked against the shared budget", 1024 * mib, true, 4, 2, 2, 1_200_000,
			memoryPlan{budget: 256 * mib, sort: 232 * mib, serve: 32 * mib, merge: 64 * mib}},
		{"and a shared budget can keep a smaller input", 1024 * mib, true, 4, 2, 2, 1_000_000,
			memoryPlan{budget: 256 * mib, sort: 232 * mib, serve: 16 * mib, merge: 32 * mib, keep: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newMemoryPlan(tc.budget, tc.shared, tc.onMachine, tc.cores, tc.ppw, tc.records)
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(memoryPlan{})); d != "" {
				t.Fatal(d)
			}
		})
	}
}
