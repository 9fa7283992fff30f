package extsort

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"sort"
)

// A splitter is a position in the stable merge order of a set of runs: the
// record at offset pos (in records) of run `run`, whose key is key. The merge
// orders records by (key, run, pos), so the records before a splitter are,
// in each run j:
//
//	j <  run: every record with key <= key  (upper bound)
//	j == run: the first pos records
//	j >  run: every record with key <  key  (lower bound)
//
// Because run and pos break ties, splitters can cut through a run of equal
// keys: with every key equal the ranges are still balanced.
type splitter struct {
	key      [keySize]byte
	run      int
	pos      int64
	weighted float64 // records represented by this sample
}

func cmpSplitter(a, b splitter) int {
	if c := bytes.Compare(a.key[:], b.key[:]); c != 0 {
		return c
	}
	if a.run != b.run {
		return a.run - b.run
	}
	switch {
	case a.pos < b.pos:
		return -1
	case a.pos > b.pos:
		return 1
	}
	return 0
}

// samplesPerRun is how many keys are read from each run to place splitters.
const samplesPerRun = 1024

// splitRuns cuts runs into at most parts ranges of about equal size that can
// be merged independently. ranges[i][j] is run j's segment in range i, and
// the concatenation of the ranges' merges is the merge of the runs.
func splitRuns(runs []Run, parts int) ([][]Segment, error) {
	files := make([]*os.File, len(runs))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	var cands []splitter
	var total float64
	for j, r := range runs {
		f, err := os.Open(r.Path)
		if err != nil {
			return nil, fmt.Errorf("extsort: split: %w", err)
		}
		files[j] = f
		m := min(r.Records, samplesPerRun)
		for i := int64(0); i < m; i++ {
			pos := i * r.Records / m
			s := splitter{run: j, pos: pos, weighted: float64(r.Records) / float64(m)}
			if _, err := f.ReadAt(s.key[:], pos*recSize); err != nil {
				return nil, fmt.Errorf("extsort: split: read %s: %w", r.Path, err)
			}
			cands = append(cands, s)
		}
		total += float64(r.Records)
	}
	slices.SortFunc(cands, cmpSplitter)

	// offsets[i][j]: records of run j before splitter i; row 0 is all zeros
	// and the last row is every run's length.
	offsets := [][]int64{make([]int64, len(runs))}
	var cum float64
	next := 1
	for _, c := range cands {
		if next >= parts {
			break
		}
		if cum >= float64(next)*total/float64(parts) {
			row, err := splitterOffsets(files, runs, c)
			if err != nil {
				return nil, err
			}
			offsets = append(offsets, row)
			for cum >= float64(next)*total/float64(parts) {
				next++
			}
		}
		cum += c.weighted
	}
	last := make([]int64, len(runs))
	for j, r := range runs {
		last[j] = r.Records
	}
	offsets = append(offsets, last)

	var ranges [][]Segment
	for i := 0; i+1 < len(offsets); i++ {
		segs := make([]Segment, len(runs))
		for j, r := range runs {
			from, to := offsets[i][j], offsets[i+1][j]
			segs[j] = Segment{Path: r.Path, Offset: from * recSize, Length: (to - from) * recSize}
		}
		ranges = append(ranges, segs)
	}
	return ranges, nil
}

func splitterOffsets(files []*os.File, runs []Run, s splitter) ([]int64, error) {
	row := make([]int64, len(runs))
	for j, r := range runs {
		var err error
		switch {
		case j < s.run:
			row[j], err = searchRun(files[j], r, func(k []byte) bool { return bytes.Compare(k, s.key[:]) > 0 })
		case j == s.run:
			row[j] = s.pos
		default:
			row[j], err = searchRun(files[j], r, func(k []byte) bool { return bytes.Compare(k, s.key[:]) >= 0 })
		}
		if err != nil {
			return nil, err
		}
	}
	return row, nil
}

// searchRun returns the first record index in the sorted run whose key
// satisfies pred (which must be monotone), reading keys with ReadAt.
func searchRun(f *os.File, r Run, pred func(key []byte) bool) (int64, error) {
	var key [keySize]byte
	var rerr error
	i := sort.Search(int(r.Records), func(i int) bool {
		if rerr != nil {
			return true
		}
		if _, err := f.ReadAt(key[:], int64(i)*recSize); err != nil {
			rerr = fmt.Errorf("extsort: split: read %s: %w", r.Path, err)
			return true
		}
		return pred(key[:])
	})
	return int64(i), rerr
}
