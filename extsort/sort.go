package extsort

import (
	"context"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/internal/par"
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
// Empty input (no records) writes no partition (and removes those of an
// earlier sort) and returns zero Stats. Output or temp directories inside an
// input directory are an error (see CheckSeparate).
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
	stage, err := StageOutput(inputs, outDir, cfg.TempDir, spillPrefix, cfg.Logger)
	if err != nil {
		return Stats{}, err
	}
	defer stage.Close()
	staging := stage.Path()
	if st.Bytes == 0 {
		// No records, so no partitions: committing the empty staging dir
		// removes the partition files of an earlier sort.
		_, err := stage.Commit()
		return st, err
	}

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
	if _, err := stage.Commit(); err != nil {
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
	return records*recSize + chunk*(recSize+entryOverhead) + int64(cfg.Workers)*cfg.gather + fixedSlack
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
		tmp, err := fsutil.CreateOwnedDir(cfg.TempDir, spillPrefix)
		if err != nil {
			return fmt.Errorf("extsort: temp directory: %w", err)
		}
		defer tmp.Close()
		spillDir = tmp.Path
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
	// Each merge worker gets an equal share of the budget, held in one
	// arena it reuses for every range. In memory the runs need no read
	// buffers, only the output buffer.
	memory := (cfg.Memory - fixedSlack) / int64(cfg.Workers)
	if st.InMemory {
		memory = mergeOutBuf + minMergeBuf
	} else if len(runs) > fanIn(memory) {
		// More runs than a merge can buffer: merge groups of them first.
		var cleanup func()
		runs, cleanup, err = reduceRuns(ctx, cfg, memory, runs, spillDir)
		defer cleanup()
		if err != nil {
			return err
		}
	}
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
	err = mergeRanges(ctx, cfg, memory, srcs, ranges, out)
	st.Merge = time.Since(t1)
	if err != nil {
		return err
	}
	return ctx.Err()
}

// reduceRuns merges groups of runs into fewer, longer ones in spillDir until
// a merge can buffer them all; cleanup removes the runs it made.
func reduceRuns(ctx context.Context, cfg Config, memory int64, runs []Run, spillDir string) (_ []Run, cleanup func(), _ error) {
	segs := make([]Segment, len(runs))
	for i, r := range runs {
		segs[i] = r.Segment()
	}
	segs, cleanup, err := reduceSegments(ctx, memory, cfg.Workers, segs, spillDir, true)
	if err != nil {
		return runs, cleanup, err
	}
	runs = runs[:0]
	for _, sg := range segs {
		runs = append(runs, Run{Path: sg.Path, Records: sg.Length / recSize})
	}
	cfg.Logger.Debug("reduced runs", "runs", len(runs))
	return runs, cleanup, nil
}

// mergeRanges merges the ranges of the runs srcs in parallel, each straight
// to its place in out, one arena of memory bytes per merge worker.
func mergeRanges(ctx context.Context, cfg Config, memory int64, srcs []source, ranges [][]source, out *partOutput) error {
	arenas := make(chan *arena, cfg.Workers)
	for range cfg.Workers {
		a := newArena(memory)
		defer a.free()
		arenas <- a
	}
	return par.Do(ctx, len(ranges), cfg.Workers, func(ctx context.Context, i int) error {
		a := <-arenas
		defer func() { arenas <- a }()
		var off int64 // the range starts after everything before it in every run
		for j, src := range ranges[i] {
			off += src.off - srcs[j].off
		}
		ow := &offsetWriter{w: out, off: off}
		return mergeSources(ctx, memory, ranges[i], ow, func(n int64) { cfg.Progress(PhaseMerge, n) }, a)
	})
}
