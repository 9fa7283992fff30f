package dsort

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/record"
)

// The budget covers the worker process's whole resident memory, the way
// the operating system counts it (peak RSS), so what the phases' shares
// cannot hold is set aside first.
const (
	// binaryResident is what the gantry binary's own pages (code, data)
	// that a worker touches keep resident: about 25 MiB.
	binaryResident = 24 << 20
	// runtimeReserve is kept out of the phases' shares: binaryResident,
	// then the Go runtime (its heap's own data, goroutine stacks), gRPC's
	// connection buffers (ioBufferSize each way, to the master and to and
	// from every peer) and the heartbeats.
	runtimeReserve = 40 << 20
	// fetchStreamMemory is one fetch stream's buffers: the message chunks
	// are decoded into and what gRPC holds of its flow-control window.
	fetchStreamMemory = chunkBytes + shuffleStreamWindow
	// serveStreamMemory is one served stream's chunk and gRPC's encoding
	// of it, sent while the next chunk is merged.
	serveStreamMemory = 2 * chunkBytes
	// directWriteMemory is the buffers of one partition's output written
	// past the page cache (fsutil.WriteAtomicDirect: 3 blocks of 4 MB).
	directWriteMemory = 12 << 20
)

// minMergeMemory is the least a single merge (one served stream or one
// partition) gets, however many run at once.
const minMergeMemory = 4 << 20

// memoryPlan divides a worker's memory budget among its phases. It is
// computed once, when the partition config arrives (before Sorting), and
// every phase reads its share from it. The work share is the budget less
// runtimeReserve:
//
//	sort   the whole work share (run generation runs alone; extsort's
//	       buffers are mapped outside the Go heap)
//	serve  each ShuffleData stream's merge of its run slices (one stream
//	       per core)
//	merge  each partition's merge (min(cores, partitions per worker) at
//	       once), on top of its output's directWriteMemory
//
// Serving, fetching and merging overlap through the shuffle, so they share
// the work share: first each fetch stream's fetchStreamMemory, each served
// stream's serveStreamMemory and each merge's directWriteMemory, then what
// is left goes a third to the served streams' merges, two thirds to the
// partitions' merges (both mapped outside the Go heap and unmapped as each
// merge ends).
//
// goLimit is the Go runtime's share, which the worker sets as its soft
// memory limit (limitGoMemory): the reserve less binaryResident, and the
// fetched and served streams' buffers, which gRPC and the streams
// allocate on the Go heap. Without it the heap's garbage grows to as much
// as the heap holds live before a collection frees it.
//
// keep: the worker's whole input is sorted as one chunk and kept in memory
// (extsort.Sorted) through Shuffling and Merging instead of being spilled
// as a run: no run is written, read back or cached. It is chosen when the
// kept data (extsort.SortedCost) fits half the work share; the served
// streams' and partitions' merges then share what the kept data leaves.
type memoryPlan struct {
	budget  int64 // the budget in force (after sharing with the machine's other workers)
	sort    int64 // extsort.GenerateRuns or extsort.SortInMemory
	serve   int64 // each ShuffleData stream's merge
	merge   int64 // each partition's merge
	goLimit int64 // the Go runtime's soft memory limit (see above)
	keep    bool  // sort in memory and keep the sorted input (see above)
}

// neverKeep makes every plan spill; tests set it to run the spilled path on
// small inputs.
var neverKeep bool

// newMemoryPlan plans budget for a worker with cores cores, fetches fetch
// streams at once, ppw partitions and records input records. When the
// budget was defaulted (shared), it is first divided among the job's
// onMachine workers on this machine, keeping at least what a sort needs; a
// budget the user set is kept as given. tls is what the job's TLS holds on
// the heap (tlsMemory; 0 in plaintext), counted with the streams.
func newMemoryPlan(budget int64, shared bool, onMachine, cores, fetches, ppw int, records, tls int64) memoryPlan {
	if shared && onMachine > 1 {
		budget = max(budget/int64(onMachine), extsort.MinMemory+runtimeReserve)
	}
	cores, fetches, ppw = max(cores, 1), max(fetches, 1), max(ppw, 1)
	merges := min(cores, ppw)
	work := max(budget-runtimeReserve, extsort.MinMemory)
	keep := !neverKeep && records > 0 && extsort.SortedCost(records) <= work/2 &&
		extsort.FitsOneChunk(extsort.Config{Memory: work, Workers: cores}, records)
	streams := int64(fetches)*fetchStreamMemory + int64(cores)*serveStreamMemory + tls
	left := work - streams - int64(merges)*directWriteMemory
	if keep {
		left -= extsort.SortedCost(records)
	}
	return memoryPlan{
		budget:  budget,
		sort:    work,
		serve:   max(wholeMiB(left/3/int64(cores)), minMergeMemory),
		merge:   max(wholeMiB(left*2/3/int64(merges)), minMergeMemory),
		goLimit: runtimeReserve - binaryResident + streams,
		keep:    keep,
	}
}

// tlsConnState is what crypto/tls holds for one connection between writes:
// the raw and decrypted input of a record (16 KiB and its overhead each,
// grown by half for the buffers' growth).
const tlsConnState = 48 << 10

// tlsMemory is what mutual TLS adds to a worker's heap with cores served
// streams, fetches fetch streams and workers workers in the job: a write
// buffer (batchMax) for each stream writing at once (batchConn shares them
// between connections), and tlsConnState for each connection: to the
// master, to every peer and from every peer. Without it in the Go limit
// (goLimit) the heap ran at the limit and collected over and over: TLS
// cost 1.47x the plaintext job's time, and 1.09x-1.15x with the limit
// lifted.
func tlsMemory(cores, fetches, workers int) int64 {
	return int64(cores+fetches)*batchMax + int64(2*workers+1)*tlsConnState
}

// wholeMiB rounds n down to whole MiB.
func wholeMiB(n int64) int64 { return n &^ (1<<20 - 1) }

// planMemory plans the worker's budget once the partition config is in:
// with onMachine of the job's workers on this machine (a defaulted budget
// is divided among them) and ppw partitions per worker. With
// WorkerConfig.LimitGoMemory it sets the Go runtime's soft memory limit
// from the plan (limitGoMemory).
func (w *Worker) planMemory(onMachine, ppw int) memoryPlan {
	records := w.inputBytes / record.Size
	if w.format.lines() {
		records = 0 // nothing kept in memory: lines are always spilled as runs
	}
	var tls int64
	if w.cfg.TLS.Enabled() {
		tls = tlsMemory(w.cores, w.cfg.FetchParallel, w.asg.numWorkers)
	}
	mem := newMemoryPlan(w.cfg.Memory, w.cfg.sharedMemory, onMachine, w.cores, w.cfg.FetchParallel, max(ppw, 1), records, tls)
	if w.format.lines() {
		// linesort's chunk and read buffers are on the Go heap, not
		// mapped outside it as extsort's are: the heap may use the budget.
		mem.goLimit = mem.budget - binaryResident
	}
	if w.cfg.sharedMemory && onMachine > 1 {
		w.cfg.Logger.Info("memory budget shared with the job's other workers on this machine",
			"workers_on_machine", onMachine, "budget_bytes", mem.budget)
	}
	if w.cfg.LimitGoMemory && limitGoMemory(mem.goLimit) {
		w.cfg.Logger.Debug("Go soft memory limit set", "limit_bytes", debug.SetMemoryLimit(-1))
	}
	return mem
}

// shareCores takes, with WorkerConfig.ShareCores, this worker's share of
// the machine's cores when onMachine of the job's workers run on it: it
// sets runtime.GOMAXPROCS and w.cores, which size the sort, the served
// streams and the merges. Called before the memory plan, which divides its
// buffers by w.cores.
func (w *Worker) shareCores(onMachine int) {
	if !w.cfg.ShareCores || onMachine <= 1 || os.Getenv("GOMAXPROCS") != "" {
		return
	}
	n := max(w.machine/onMachine, 1) // of the machine's, so a second call gives the same
	if n == w.cores {
		return
	}
	runtime.GOMAXPROCS(n)
	w.cfg.Logger.Info("cores shared with the job's other workers on this machine",
		"workers_on_machine", onMachine, "cores", n)
	w.cores = n
}

// goMemory is the soft memory limit this package set: the sum of the Go
// shares of the workers planned in this process (one, from the CLI).
var goMemory struct {
	sync.Mutex
	limit int64 // 0 until set
}

// limitGoMemory adds n to the Go runtime's soft memory limit
// (debug.SetMemoryLimit) that this package sets for the workers of this
// process, and reports whether it did. It leaves alone a limit set by
// GOMEMLIMIT or by the program. The limit is never lowered: a worker that
// ends leaves its share to the process, which a CLI worker exits with.
func limitGoMemory(n int64) bool {
	goMemory.Lock()
	defer goMemory.Unlock()
	cur := debug.SetMemoryLimit(-1)
	if goMemory.limit == 0 && cur != math.MaxInt64 || goMemory.limit != 0 && cur != goMemory.limit {
		return false // not ours
	}
	goMemory.limit += n
	debug.SetMemoryLimit(goMemory.limit)
	return true
}
