package dsort

import (
	"runtime"
	"testing"

	"github.com/gantryhq/gantry/extsort"
	"github.com/google/go-cmp/cmp"
)

// With ShareCores, a worker that shares its machine with others of the job
// takes its share of the cores (GOMAXPROCS and the streams and merges it
// runs at once); alone on its machine, without ShareCores, or with
// GOMAXPROCS set in the environment it keeps them all.
func TestWorkerSharesCores(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	// A set budget, so the plan does not depend on the host's memory.
	base := WorkerConfig{Master: "127.0.0.1:1", Inputs: []string{t.TempDir()}, Output: t.TempDir(), Memory: 2 << 30}
	worker := func(share bool) *Worker {
		cfg := base
		cfg.ShareCores = share
		w, err := NewWorker(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	for _, tc := range []struct {
		name      string
		share     bool
		env       string
		onMachine int
		want      int
	}{
		{"alone", true, "", 1, 4},
		{"two on the machine", true, "", 2, 2},
		{"four", true, "", 4, 1},
		{"more workers than cores", true, "", 6, 1},
		{"not asked to share", false, "", 4, 4},
		{"GOMAXPROCS set", true, "4", 4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GOMAXPROCS(4)
			if tc.env != "" {
				t.Setenv("GOMAXPROCS", tc.env)
			}
			w := worker(tc.share)
			whole := w.planMemory(tc.onMachine, 8).serve // each stream's share with all the cores
			w.shareCores(tc.onMachine)
			w.shareCores(tc.onMachine) // a second call (a restarted phase) takes the same share
			if w.cores != tc.want || runtime.GOMAXPROCS(0) != tc.want {
				t.Errorf("cores %d, GOMAXPROCS %d; want %d", w.cores, runtime.GOMAXPROCS(0), tc.want)
			}
			if serve := w.planMemory(tc.onMachine, 8).serve; tc.want < 4 && serve <= whole {
				t.Errorf("fewer streams at once leave each no more memory: %d, with all the cores %d", serve, whole)
			}
		})
	}
}

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

// goShare is the Go runtime's share of a plan with fetches fetch streams
// and cores served streams.
func goShare(fetches, cores int64) int64 {
	return runtimeReserve - binaryResident + fetches*fetchStreamMemory + cores*serveStreamMemory
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
		// 984 MiB to share: 4 fetches (12 MiB), 4 served streams (8 MiB),
		// 4 merges' direct writes (48 MiB); 916 MiB left, a third to the
		// served streams, two thirds to the merges.
		{"alone, 1 GiB, 4 cores, 8 partitions", 1024 * mib, true, 1, 4, 8, 0,
			memoryPlan{budget: 1024 * mib, sort: 984 * mib, serve: 76 * mib, merge: 152 * mib, goLimit: goShare(4, 4)}},
		{"a defaulted budget is shared by the machine's 4 workers", 1024 * mib, true, 4, 2, 2, 0,
			memoryPlan{budget: 256 * mib, sort: 216 * mib, serve: 29 * mib, merge: 58 * mib, goLimit: goShare(4, 2)}},
		{"a budget the user set is not shared", 1024 * mib, false, 4, 2, 2, 0,
			memoryPlan{budget: 1024 * mib, sort: 984 * mib, serve: 157 * mib, merge: 314 * mib, goLimit: goShare(4, 2)}},
		{"the issue's 128 MiB, 2 cores, 15 partitions", 128 * mib, false, 4, 2, 15, 0,
			memoryPlan{budget: 128 * mib, sort: 88 * mib, serve: 8 * mib, merge: 16 * mib, goLimit: goShare(4, 2)}},
		{"sharing keeps what a sort needs", 64 * mib, true, 8, 1, 1, 0,
			memoryPlan{budget: 56 * mib, sort: 16 * mib, serve: minMergeMemory, merge: minMergeMemory, goLimit: goShare(4, 1)}},
		{"merges run on at most ppw partitions at once", 512 * mib, false, 1, 8, 2, 0,
			memoryPlan{budget: 512 * mib, sort: 472 * mib, serve: 17 * mib, merge: 140 * mib, goLimit: goShare(4, 8)}},
		{"tiny shares get the floor", 40 * mib, false, 1, 64, 64, 0,
			memoryPlan{budget: 40 * mib, sort: 16 * mib, serve: minMergeMemory, merge: minMergeMemory, goLimit: goShare(4, 64)}},
		{"an input whose sorted form fits half the work share is kept, the merges sharing what it leaves", 1024 * mib, false, 1, 2, 2, 4_000_000,
			memoryPlan{budget: 1024 * mib, sort: 984 * mib, serve: 83 * mib, merge: 167 * mib, goLimit: goShare(4, 2), keep: true}},
		{"one that does not is spilled", 1024 * mib, false, 1, 2, 2, 5_000_000,
			memoryPlan{budget: 1024 * mib, sort: 984 * mib, serve: 157 * mib, merge: 314 * mib, goLimit: goShare(4, 2)}},
		{"the kept size is checked against the shared budget", 1024 * mib, true, 4, 2, 2, 1_000_000,
			memoryPlan{budget: 256 * mib, sort: 216 * mib, serve: 29 * mib, merge: 58 * mib, goLimit: goShare(4, 2)}},
		{"and a shared budget can keep a smaller input", 1024 * mib, true, 4, 2, 2, 900_000,
			memoryPlan{budget: 256 * mib, sort: 216 * mib, serve: 12 * mib, merge: 25 * mib, goLimit: goShare(4, 2), keep: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newMemoryPlan(tc.budget, tc.shared, tc.onMachine, tc.cores, 4, tc.ppw, tc.records, 0)
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(memoryPlan{})); d != "" {
				t.Fatal(d)
			}
		})
	}
}
