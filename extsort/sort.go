package extsort

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Stats describes a finished sort.
type Stats struct {
	Records    int64
	Bytes      int64
	InMemory   bool // the input fit the budget: no runs were spilled
	Runs       int  // sorted runs spilled to the temp dir
	Partitions int  // partition.<n> files written
	// Phase durations. Read+sort covers reading the input and sorting it in
	// memory; Spill covers writing runs; Merge covers merging (or, in
	// memory, gathering) into the output files.
	ReadSort, Spill, Merge time.Duration
}

// Sort sorts the records of inputs into partition.<n> files in outDir,
// numbered from cfg.FirstPartition, each cfg.PartitionSize bytes except the
// last. outDir is created if needed; it may hold partition files of an
// earlier sort (they are replaced) but nothing else. Nothing appears in
// outDir until the whole output is written; on error or cancellation the
// partial output and every temporary file are removed.
//
// Empty input (no records) writes nothing and returns zero Stats.
func Sort(ctx context.Context, cfg Config, inputs []Input, outDir string) (Stats, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Stats{}, err
	}
	if err := cfg.checkSortMemory(); err != nil {
		return Stats{}, err
	}
	var st Stats
	for _, in := range inputs {
		st.Bytes += in.Size
	}
	st.Records = st.Bytes / recSize
	if err := prepareOutputDir(outDir); err != nil {
		return Stats{}, err
	}
	if st.Bytes == 0 {
		return st, nil
	}
	staging, err := os.MkdirTemp(outDir, stagingPrefix+"*")
	if err != nil {
		return Stats{}, fmt.Errorf("extsort: output directory: %w", err)
	}
	defer os.RemoveAll(staging)

	out, err := newPartOutput(staging, cfg.FirstPartition, cfg.PartitionSize, st.Bytes)
	if err != nil {
		return Stats{}, err
	}
	defer out.Close()
	st.Partitions = len(out.files)

	if err := sortRuns(ctx, cfg, inputs, out, &st); err != nil {
		return Stats{}, err
	}
	if err := out.Close(); err != nil {
		return Stats{}, err
	}
	if _, err := commitOutput(outDir, staging); err != nil {
		return Stats{}, err
	}
	return st, nil
}

// memRunRecords bounds a chunk when the runs stay in memory. The gather of
// a sorted chunk reads its records in key order, i.e. at random; within a
// chunk of this size those reads mostly hit the TLB and the merge that
// follows reads every run sequentially. A var so tests can shrink it.
var memRunRecords int64 = (96 << 20) / recSize

// inMemoryCost is what sortRuns needs to keep every run in memory.
func inMemoryCost(cfg Config, records int64) int64 {
	chunk := min(memRunRecords, records)
	return records*recSize + chunk*(recSize+entryOverhead) + int64(cfg.Workers)*gatherBufSize + fixedSlack
}

// sortRuns sorts chunks of the input into runs, kept in memory when the
// whole input fits the budget and spilled to the temp dir otherwise, cuts
// the runs into ranges with composite splitters, and merges the ranges in
// parallel, each straight to its place in the output.
func sortRuns(ctx context.Context, cfg Config, inputs []Input, out *partOutput, st *Stats) error {
	chunk := min(cfg.chunkRecords(), st.Records)
	spillDir := ""
	if inMemoryCost(cfg, st.Records) <= cfg.Memory {
		st.InMemory = true
		chunk = min(memRunRecords, st.Records)
	} else {
		tmp, err := os.MkdirTemp(cfg.TempDir, "gantry-sort-*")
		if err != nil {
			return fmt.Errorf("extsort: temp directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		spillDir = tmp
	}
	s := newSorter(cfg, chunk)
	runs, err := s.generateRuns(ctx, inputs, spillDir)
	defer func() {
		for _, r := range runs {
			if r.free != nil {
				r.free()
			}
		}
	}()
	// Give the chunk buffers back before the merge allocates its own, so
	// peak RSS stays within the budget.
	s.free()
	if err != nil {
		return err
	}
	st.Runs = len(runs)
	st.ReadSort, st.Spill = s.readSort, s.spill

	t1 := time.Now()
	srcs, closeRuns, err := openRuns(runs)
	if err != nil {
		return err
	}
	defer closeRuns()
	parts := max(1, min(4*cfg.Workers, int(st.Records/1024)))
	ranges, err := splitRuns(srcs, parts)
	if err != nil {
		return err
	}
	cfg.Logger.Debug("merging", "runs", len(runs), "ranges", len(ranges))
	memory := (cfg.Memory - fixedSlack) / int64(cfg.Workers)
	if st.InMemory {
		memory = mergeOutBuf + minMergeBuf // in-memory runs need no read buffers
	}
	var next atomic.Int64
	errs := make([]error, cfg.Workers)
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ranges) {
					return
				}
				var off int64 // the range starts after everything before it in every run
				for j, src := range ranges[i] {
					off += src.off - srcs[j].off
				}
				ow := &offsetWriter{w: out, off: off}
				err := mergeSources(ctx, memory, ranges[i], ow, func(n int64) { cfg.Progress(PhaseMerge, n) })
				if err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	st.Merge = time.Since(t1)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}
