package dsort

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/par"
	"github.com/gantryhq/gantry/record"
)

// Boundary is a composite split point between two partitions (see
// README.md, "Skew"). A record with key k, origin worker o and rank r (its
// position among o's records with key k, in o's stable sorted order) lies
// before the boundary iff
//
//	k < Key, or k == Key and (o < Worker, or o == Worker and r < Count).
//
// Splitting on (key, origin, rank) instead of the key alone lets a run of
// equal keys spread over several partitions, deterministically: extsort
// sorts stably, so the rank of a record does not depend on how the worker's
// input was cut into runs, and a restarted worker cuts its data exactly as
// its predecessor did.
type Boundary struct {
	Key    []byte // a record's key, or a line's full key (linesort.Order.AppendFullKey)
	Worker int
	Count  int64
}

// partitionConfig is what a worker needs to cut its data into partitions:
// the job's boundaries and shape. The master sends it (SetPartitionBoundaries)
// and the worker takes it in once, in runPhases.
type partitionConfig struct {
	bounds    []Boundary // len == perWorker*workers - 1, non-decreasing
	perWorker int        // partitions per worker (ppw)
	workers   int        // N
	onMachine int        // the job's workers on the receiver's machine
}

// partitionName is the output file of partition p.
func partitionName(p int) string { return record.PartitionPrefix + strconv.Itoa(p) }

// isPartitionName reports whether name is partition.<digits> (leading zeros
// included: such a file would also break validation of the output).
func isPartitionName(name string) bool {
	n, ok := strings.CutPrefix(name, record.PartitionPrefix)
	return ok && n != "" && strings.TrimLeft(n, "0123456789") == ""
}

// infiniteBoundary lies after every gensort record of a job with n
// workers.
func infiniteBoundary(n int) Boundary {
	return Boundary{Key: bytes.Repeat([]byte{0xFF}, record.KeySize), Worker: n}
}

// compareBoundaries orders boundaries (composite order).
func compareBoundaries(a, b Boundary) int {
	return cmp.Or(bytes.Compare(a.Key, b.Key), cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Count, b.Count))
}

// sampleKey is one sampled key with its origin.
type sampleKey struct {
	key    string
	worker int
	seq    int // position in the worker's sample, i.e. input order
}

// computeBoundaries picks numPartitions-1 boundaries from the workers'
// samples so that every partition receives about the same number of
// records. keys[w] is worker w's sample (keys taken evenly over its input
// in input order: splitSample) and records[w] the number of records it
// holds: every sampled key of w stands for records[w]/len(sample) records.
// Without samples enough, the last boundaries are infinite for gensort
// and, for lines (whose keys have no greatest value), the last one found
// again (or one before every line): a partition past them is empty, the
// last one takes the lines after them.
func computeBoundaries(keys [][][]byte, records []int64, numPartitions int, lines bool) []Boundary {
	n := len(keys)
	var all []sampleKey
	weight := make([]float64, n)
	var total float64
	for w, ks := range keys {
		cnt := len(ks)
		if cnt == 0 || records[w] == 0 {
			continue
		}
		weight[w] = float64(records[w]) / float64(cnt)
		total += float64(records[w])
		for i := range cnt {
			s := sampleKey{key: string(ks[i]), worker: w, seq: i}
			all = append(all, s)
		}
	}
	slices.SortFunc(all, func(a, b sampleKey) int {
		return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.worker, b.worker), cmp.Compare(a.seq, b.seq))
	})
	out := make([]Boundary, 0, max(numPartitions-1, 0))
	var cum float64 // weight of the samples before all[i]
	// sameKey counts, for the current key, the samples of each worker seen.
	sameKey := make([]int64, n)
	next := 1
	for i := 0; i < len(all) && next < numPartitions; i++ {
		s := all[i]
		if i > 0 && all[i-1].key != s.key {
			clear(sameKey)
		}
		for next < numPartitions && cum >= float64(next)*total/float64(numPartitions) {
			out = append(out, Boundary{Key: []byte(s.key), Worker: s.worker,
				Count: int64(math.Round(float64(sameKey[s.worker]) * weight[s.worker]))})
			next++
		}
		cum += weight[s.worker]
		sameKey[s.worker]++
	}
	for len(out) < numPartitions-1 {
		switch {
		case !lines:
			out = append(out, infiniteBoundary(n))
		case len(out) > 0:
			out = append(out, out[len(out)-1])
		default:
			out = append(out, Boundary{Worker: n})
		}
	}
	return out
}

// keyReader reads the keys of a sorted file of records by record index.
type keyReader struct {
	r   io.ReaderAt
	buf [record.KeySize]byte
	err error
}

func (k *keyReader) key(i int64) []byte {
	if k.err != nil {
		return k.buf[:]
	}
	if _, err := k.r.ReadAt(k.buf[:], i*record.Size); err != nil {
		k.err = err
	}
	return k.buf[:]
}

// searchKeys returns the first index in [0,n) whose key is >= key (or >
// key when strict), as sort.Search does.
func (k *keyReader) search(n int64, key []byte, strict bool) int64 {
	lo, hi := int64(0), n
	for lo < hi {
		m := lo + (hi-lo)/2
		c := bytes.Compare(k.key(m), key)
		if c < 0 || (strict && c == 0) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// runSplits returns, for every run of worker `self` (runs in input order,
// each sorted stably), the byte offsets that cut it into partitions:
// splits[r] has len(bounds)+2 entries, splits[r][p]..splits[r][p+1] being
// partition p's records in run r.
func runSplits(runs []extsort.Run, bounds []Boundary, self int) ([][]int64, error) {
	splits := make([][]int64, len(runs))
	// seen[b] counts the records with key bounds[b].Key in earlier runs:
	// the rank of a run's first such record in the worker's sorted order.
	seen := make([]int64, len(bounds))
	for r, run := range runs {
		ra := run.Reader
		if ra == nil {
			f, err := os.Open(run.Path)
			if err != nil {
				return nil, fmt.Errorf("dsort: open run: %w", err)
			}
			defer f.Close()
			ra = f
		}
		kr := &keyReader{r: ra}
		s := make([]int64, 0, len(bounds)+2)
		s = append(s, 0)
		for b, bd := range bounds {
			lower := kr.search(run.Records, bd.Key, false)
			upper := kr.search(run.Records, bd.Key, true)
			var cut int64
			switch {
			case self < bd.Worker:
				cut = upper
			case self > bd.Worker:
				cut = lower
			default:
				cut = lower + min(max(bd.Count-seen[b], 0), upper-lower)
			}
			seen[b] += upper - lower
			// Boundaries are non-decreasing, so cuts are too; guard anyway
			// against a malformed config.
			cut = max(cut, s[len(s)-1])
			s = append(s, cut)
		}
		s = append(s, run.Records)
		if kr.err != nil {
			return nil, fmt.Errorf("dsort: read run %s: %w", run.Path, kr.err)
		}
		for i := range s {
			s[i] *= record.Size
		}
		splits[r] = s
	}
	return splits, nil
}

// sampleInputs reads up to n keys spread evenly over all of inputs (taken
// as one concatenated sequence of records), in input order.
func sampleInputs(inputs []extsort.Input, n int) ([]byte, int64, error) {
	var total int64
	for _, in := range inputs {
		total += in.Size / record.Size
	}
	if total == 0 || n <= 0 {
		return nil, total, nil
	}
	n = int(min(int64(n), total))
	out := make([]byte, n*record.KeySize)
	// The keys are read by sampleReaders goroutines, each a contiguous
	// share of them: input the page cache no longer holds is then read
	// with that many requests in flight, not one scattered read at a time.
	readers := min(sampleReaders, n)
	err := par.Do(context.Background(), readers, readers, func(_ context.Context, r int) error {
		return sampleRange(inputs, total, n, r*n/readers, (r+1)*n/readers, out)
	})
	if err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// sampleReaders is how many goroutines read a sample.
const sampleReaders = 16

// sampleRange reads keys [from, to) of the n keys spread evenly over the
// total records of inputs into out (key j at j·KeySize).
func sampleRange(inputs []extsort.Input, total int64, n, from, to int, out []byte) error {
	fi, base := 0, int64(0) // inputs[fi] starts at record index base
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for j := from; j < to; j++ {
		idx := (2*int64(j) + 1) * total / (2 * int64(n))
		for idx >= base+inputs[fi].Size/record.Size {
			base += inputs[fi].Size / record.Size
			fi++
			if f != nil {
				f.Close()
				f = nil
			}
		}
		if f == nil {
			var err error
			if f, err = os.Open(inputs[fi].Path); err != nil {
				return fmt.Errorf("dsort: sample: %w", err)
			}
		}
		if _, err := f.ReadAt(out[j*record.KeySize:(j+1)*record.KeySize], (idx-base)*record.Size); err != nil {
			return fmt.Errorf("dsort: sample %s: %w", inputs[fi].Path, err)
		}
	}
	return nil
}
