package extsort

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/gantryhq/gantry/internal/sysmem"
)

// Config controls a sort. The zero value is usable: every field documents
// its default.
type Config struct {
	// Memory is the budget for the sort's buffers in bytes. Zero means a
	// quarter of the machine's RAM. Peak RSS stays within Memory plus a small
	// fixed overhead (the Go runtime, goroutine stacks, file buffers of the
	// page cache excluded). Sort and GenerateRuns need at least MinMemory;
	// Merge works with less by merging in several passes.
	Memory int64
	// TempDir is where runs are spilled. Empty means os.TempDir(). Sort makes
	// its own subdirectory there and removes it when it returns.
	TempDir string
	// Workers is how many goroutines sort, gather and merge. Zero means
	// GOMAXPROCS.
	Workers int
	// PartitionSize is the size of each output partition.<n> file in bytes
	// (the last one may be shorter). Zero means 128 MiB. Rounded down to a
	// whole number of records.
	PartitionSize int64
	// FirstPartition is the number of the first output file (partition.<n>).
	FirstPartition int
	// Logger receives debug and info lines; nil discards them.
	Logger *slog.Logger
	// Progress, if set, is called with each phase's increments of bytes
	// done. It is called from several goroutines at once.
	Progress func(phase Phase, bytes int64)

	gather int64 // each worker's gather buffer, derived by withDefaults
}

// MinMemory is the smallest memory budget accepted.
const MinMemory = 16 << 20

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("extsort: bad config")

// Phase names a stage of a sort, for progress and statistics.
type Phase int

const (
	PhaseRead  Phase = iota // reading input and sorting chunks in memory
	PhaseSpill              // writing sorted runs to the temp dir
	PhaseMerge              // merging runs (or writing the in-memory result) into the output
)

func (p Phase) String() string {
	switch p {
	case PhaseRead:
		return "read+sort"
	case PhaseSpill:
		return "spill"
	case PhaseMerge:
		return "merge+write"
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

const (
	defaultPartitionSize = 128 << 20
	// maxGather and minGather bound each worker's buffer for writing sorted
	// records; within them it is an eighth of the budget split over the
	// workers, so the buffers never crowd out the chunk.
	maxGather = 4 << 20
	minGather = 256 << 10
	// fixedSlack is kept out of the chunk for everything else the sort
	// allocates (histograms, bucket lists, merge cursors).
	fixedSlack = 4 << 20
	// entryOverhead is the in-memory cost per record on top of its 100 bytes:
	// two 16-byte entries (the sort's source and scratch).
	entryOverhead = 32
)

// withDefaults returns c with defaults filled in, or an error naming the bad field.
func (c Config) withDefaults() (Config, error) {
	if c.Memory == 0 {
		c.Memory = DefaultMemory()
	}
	if c.Memory < 0 {
		return c, fmt.Errorf("%w: memory budget %d is negative", ErrConfig, c.Memory)
	}
	if c.Workers == 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	if c.Workers < 0 {
		return c, fmt.Errorf("%w: workers %d is negative", ErrConfig, c.Workers)
	}
	// Every worker needs a gather buffer and a merge arena of its own: no
	// more workers than an eighth of the budget can give minGather each.
	c.Workers = int(max(1, min(int64(c.Workers), c.Memory/8/minGather)))
	c.gather = max(minGather, min(maxGather, c.Memory/8/int64(c.Workers)))
	c.gather -= c.gather % recSize
	if c.PartitionSize == 0 {
		c.PartitionSize = defaultPartitionSize
	}
	c.PartitionSize -= c.PartitionSize % recSize
	if c.PartitionSize <= 0 {
		return c, fmt.Errorf("%w: partition size must be at least one %d-byte record", ErrConfig, recSize)
	}
	if c.FirstPartition < 0 {
		return c, fmt.Errorf("%w: first partition number %d is negative", ErrConfig, c.FirstPartition)
	}
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = func(Phase, int64) {}
	}
	return c, nil
}

// maxChunkRecords, when positive, caps a spilled chunk: tests set it to get
// many runs from little data.
var maxChunkRecords int64

// checkSortMemory rejects budgets too small for run generation.
func (c Config) checkSortMemory() error {
	if c.Memory < MinMemory {
		return fmt.Errorf("%w: memory budget %d bytes is below the minimum of %d MiB", ErrConfig, c.Memory, MinMemory>>20)
	}
	return nil
}

// chunkRecords is how many records one in-memory chunk may hold within the
// budget: each costs its 100 bytes plus two entries, and every worker has a
// gather buffer.
func (c Config) chunkRecords() int64 {
	avail := c.Memory - int64(c.Workers)*c.gather - fixedSlack
	n := avail / (recSize + entryOverhead)
	if maxChunkRecords > 0 {
		n = min(n, maxChunkRecords)
	}
	if n > indexMask {
		n = indexMask
	}
	return max(n, 1)
}

// DefaultMemory is the budget used when none is given: a quarter of the
// machine's RAM (1 GiB if that cannot be read).
func DefaultMemory() int64 {
	if ram := sysmem.Total(); ram > 0 {
		return ram / 4
	}
	return 1 << 30
}
