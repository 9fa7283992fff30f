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

// openRuns returns a merge source for each run (in-memory runs are read in
// place) and a function that closes the files.
func openRuns(runs []Run) ([]source, func(), error) {
	srcs := make([]source, len(runs))
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for j, r := range runs {
		srcs[j] = source{name: r.Path, length: r.Records * recSize}
		if r.data != nil {
			srcs[j].mem, srcs[j].ra = r.data, bytes.NewReader(r.data)
			continue
		}
		f, err := os.Open(r.Path)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("extsort: %w", err)
		}
		files = append(files, f)
		srcs[j].ra = f
	}
	return srcs, closeAll, nil
}

// splitRuns cuts whole runs into at most parts ranges of about equal size
// that can be merged independently. ranges[i][j] is run j's part of range
// i, and the concatenation of the ranges' merges is the merge of the runs.
func splitRuns(runs []source, parts int) ([][]source, error) {
	var cands []splitter
	var total float64
	for j, r := range runs {
		f := r.ra
		m := min(r.length/recSize, samplesPerRun)
		for i := int64(0); i < m; i++ {
			recs := r.length / recSize
			pos := i * recs / m
			s := splitter{run: j, pos: pos, weighted: float64(recs) / float64(m)}
			if _, err := f.ReadAt(s.key[:], pos*recSize); err != nil {
				return nil, fmt.Errorf("extsort: split: read %s: %w", r.name, err)
			}
			cands = append(cands, s)
		}
		total += float64(r.length / recSize)
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
			row, err := splitterOffsets(runs, c)
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
		last[j] = r.length / recSize
	}
	offsets = append(offsets, last)

	var ranges [][]source
	for i := 0; i+1 < len(offsets); i++ {
		srcs := make([]source, len(runs))
		for j, r := range runs {
			from, to := offsets[i][j], offsets[i+1][j]
			srcs[j] = r
			srcs[j].off, srcs[j].length = r.off+from*recSize, (to-from)*recSize
		}
		ranges = append(ranges, srcs)
	}
	return ranges, nil
}

func splitterOffsets(runs []source, s splitter) ([]int64, error) {
	row := make([]int64, len(runs))
	for j, r := range runs {
		var err error
		switch {
		case j < s.run:
			row[j], err = searchRun(r, func(k []byte) bool { return bytes.Compare(k, s.key[:]) > 0 })
		case j == s.run:
			row[j] = s.pos
		default:
			row[j], err = searchRun(r, func(k []byte) bool { return bytes.Compare(k, s.key[:]) >= 0 })
		}
		if err != nil {
			return nil, err
		}
	}
	return row, nil
}

// searchRun returns the first record index in the sorted run whose key
// satisfies pred (which must be monotone), reading keys with ReadAt.
func searchRun(r source, pred func(key []byte) bool) (int64, error) {
	var key [keySize]byte
	var rerr error
	i := sort.Search(int(r.length/recSize), func(i int) bool {
		if rerr != nil {
			return true
		}
		if _, err := r.ra.ReadAt(key[:], r.off+int64(i)*recSize); err != nil {
			rerr = fmt.Errorf("extsort: split: read %s: %w", r.name, err)
			return true
		}
		return pred(key[:])
	})
	return int64(i), rerr
}
