package dsort

import (
	"context"
	"log/slog"

	"github.com/gantryhq/gantry/extsort"
)

// jobLayout is the job's partitioning as one worker sees it, fixed once the
// partition config is in: P = workers·ppw partitions, worker i owning
// i·ppw … (i+1)·ppw-1.
type jobLayout struct {
	self    int        // this worker's index
	workers int        // N
	ppw     int        // partitions per worker
	bounds  []Boundary // the P-1 composite boundaries
}

func (l jobLayout) partitions() int { return l.workers * l.ppw }

// own returns the range [lo, hi) of this worker's partitions.
func (l jobLayout) own() (lo, hi int) { return l.self * l.ppw, (l.self + 1) * l.ppw }

// sorter sorts a worker's input into runs: one run kept in memory when the
// memory plan allows (no spill at all), else runs spilled to runDir.
// Input: the input files and the plan; output: the runs (sort).
type sorter struct {
	format   recordFormat
	inputs   []extsort.Input
	plan     memoryPlan
	tempDir  string // extsort's scratch space
	runDir   string // where spilled runs go
	logger   *slog.Logger
	progress func(n int64) // input bytes read
}

// sort returns the runs in input order, and the sorted input when it is
// kept in memory (then the only run reads from it).
func (s *sorter) sort(ctx context.Context) ([]extsort.Run, *extsort.Sorted, error) {
	return s.format.sort(ctx, s)
}

// sortRecords is sort for gensort records.
func (s *sorter) sortRecords(ctx context.Context) ([]extsort.Run, *extsort.Sorted, error) {
	cfg := extsort.Config{Memory: s.plan.sort, TempDir: s.tempDir, Logger: s.logger}
	if s.plan.keep {
		kept, err := extsort.SortInMemory(ctx, cfg, s.inputs, s.progress)
		if err != nil {
			return nil, nil, err
		}
		return []extsort.Run{{Path: "sorted input in memory", Records: kept.Records(), Reader: kept}}, kept, nil
	}
	runs, err := extsort.GenerateRuns(ctx, cfg, s.inputs, s.runDir, s.progress)
	return runs, nil, err
}

// sortedInput is the sort phase's output, read by the piece server and the
// merge: the runs and where the boundaries cut each of them. Immutable.
type sortedInput struct {
	runs []extsort.Run
	// splits[i][p] is the byte offset of partition p's first record in
	// runs[i]. Invariant: len(splits) == len(runs).
	splits [][]int64
	// kept is the input sorted in memory when the plan keeps it (then runs
	// is its one run); free releases it once nothing reads it.
	kept *extsort.Sorted
}

// cutRuns cuts every run at the layout's boundaries.
func cutRuns(f recordFormat, runs []extsort.Run, kept *extsort.Sorted, l jobLayout) (*sortedInput, error) {
	splits, err := f.splits(runs, l.bounds, l.self)
	if err != nil {
		return nil, err
	}
	return &sortedInput{runs: runs, splits: splits, kept: kept}, nil
}

// segments returns this worker's records of partition p: one segment per
// run, in run (input) order.
func (s *sortedInput) segments(p int) []extsort.Segment {
	var segs []extsort.Segment
	for i, run := range s.runs {
		lo, hi := s.splits[i][p], s.splits[i][p+1]
		if hi > lo {
			segs = append(segs, extsort.Segment{Path: run.Path, Offset: lo, Length: hi - lo, Reader: run.Reader})
		}
	}
	return segs
}

// free releases the input kept in memory, if any. Nothing may read the
// runs afterwards.
func (s *sortedInput) free() {
	if s != nil && s.kept != nil {
		s.kept.Free()
	}
}
