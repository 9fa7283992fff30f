package dsort

import "github.com/gantryhq/gantry/extsort"

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
type memoryPlan struct {
	budget int64 // the budget in force (after sharing with the machine's other workers)
	sort   int64 // extsort.GenerateRuns
	serve  int64 // each ShuffleData stream
	merge  int64 // each partition's merge
}

// newMemoryPlan plans budget for a worker with cores cores and ppw
// partitions. When the budget was defaulted (shared), it is first divided
// among the job's onMachine workers on this machine, keeping at least what
// a sort needs; a budget the user set is kept as given.
func newMemoryPlan(budget int64, shared bool, onMachine, cores, ppw int) memoryPlan {
	if shared && onMachine > 1 {
		budget = max(budget/int64(onMachine), extsort.MinMemory+runtimeReserve)
	}
	cores, ppw = max(cores, 1), max(ppw, 1)
	return memoryPlan{
		budget: budget,
		sort:   max(budget-runtimeReserve, extsort.MinMemory),
		serve:  max(budget/4/int64(cores), minMergeMemory),
		merge:  max(budget/2/int64(min(cores, ppw)), minMergeMemory),
	}
}
