package dsort

import (
	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/record"
)

// runtimeReserve is kept out of the sort's budget for what the worker
// allocates besides extsort's buffers: the Go runtime, gRPC's transport
// buffers, heartbeats.
const runtimeReserve = 24 << 20

// minMergeMemory is the least a single merge (one served stream or one
// partition) gets, however many run at once.
const minMergeMemory = 4 << 20

// memoryPlan divides a worker's memory budget among its phases. It is
// computed once, when the partition config arrives (before Sorting), and
// every phase reads its share from it:
//
//	sort   the whole budget less runtimeReserve (run generation runs alone)
//	serve  a quarter of the budget, split over the concurrent ShuffleData
//	       streams (one per core), for each stream's merge of its run slices
//	merge  half of the budget, split over the partitions merged at once
//	       (min(cores, partitions per worker))
//
// Serving and merging overlap only with each other's tails, so the three
// shares never add up past the budget plus the reserve.
//
// keep: the worker's whole input is sorted as one chunk and kept in memory
// (extsort.Sorted) through Shuffling and Merging instead of being spilled
// as a run: no run is written, read back or cached. It is chosen when the
// kept data (extsort.SortedCost) fits half the budget; serve and merge then
// get half their usual shares, so kept + serve + merge stays within the
// budget.
type memoryPlan struct {
	budget int64 // the budget in force (after sharing with the machine's other workers)
	sort   int64 // extsort.GenerateRuns or extsort.SortInMemory
	serve  int64 // each ShuffleData stream
	merge  int64 // each partition's merge
	keep   bool  // sort in memory and keep the sorted input (see above)
}

// neverKeep makes every plan spill; tests set it to run the spilled path on
// small inputs.
var neverKeep bool

// newMemoryPlan plans budget for a worker with cores cores, ppw partitions
// and records input records. When the budget was defaulted (shared), it is
// first divided among the job's onMachine workers on this machine, keeping
// at least what a sort needs; a budget the user set is kept as given.
func newMemoryPlan(budget int64, shared bool, onMachine, cores, ppw int, records int64) memoryPlan {
	if shared && onMachine > 1 {
		budget = max(budget/int64(onMachine), extsort.MinMemory+runtimeReserve)
	}
	cores, ppw = max(cores, 1), max(ppw, 1)
	sort := max(budget-runtimeReserve, extsort.MinMemory)
	keep := !neverKeep && records > 0 && extsort.SortedCost(records) <= budget/2 &&
		extsort.FitsOneChunk(extsort.Config{Memory: sort, Workers: cores}, records)
	share := int64(1)
	if keep {
		share = 2
	}
	return memoryPlan{
		budget: budget,
		sort:   sort,
		serve:  max(budget/4/share/int64(cores), minMergeMemory),
		merge:  max(budget/2/share/int64(min(cores, ppw)), minMergeMemory),
		keep:   keep,
	}
}

// planMemory plans the worker's budget once the partition config is in:
// with onMachine of the job's workers on this machine (a defaulted budget
// is divided among them) and ppw partitions per worker.
func (w *Worker) planMemory(onMachine, ppw int) memoryPlan {
	mem := newMemoryPlan(w.cfg.Memory, w.cfg.sharedMemory, onMachine, w.cores, max(ppw, 1), w.inputBytes/record.Size)
	if w.cfg.sharedMemory && onMachine > 1 {
		w.cfg.Logger.Info("memory budget shared with the job's other workers on this machine",
			"workers_on_machine", onMachine, "budget_bytes", mem.budget)
	}
	return mem
}
