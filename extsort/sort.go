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

	if inMemoryCost(cfg, st.Records) <= cfg.Memory && st.Records < indexMask {
		err = sortInMemory(ctx, cfg, inputs, out, &st)
	} else {
		err = sortExternal(ctx, cfg, inputs, out, &st)
	}
	if err != nil {
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

// sortExternal spills sorted runs of the memory budget's size to the temp
// dir, cuts the runs into ranges with composite splitters, and merges the
// ranges in parallel, each straight to its place in the output.
func sortExternal(ctx context.Context, cfg Config, inputs []Input, out *partOutput, st *Stats) error {
	tmp, err := os.MkdirTemp(cfg.TempDir, "gantry-sort-*")
	if err != nil {
		return fmt.Errorf("extsort: temp directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	s := newSorter(cfg, min(cfg.chunkRecords(), st.Records))
	runs, err := s.generateRuns(ctx, inputs, tmp)
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
