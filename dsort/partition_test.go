package dsort

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/record/recordtest"
	"github.com/google/go-cmp/cmp"
)

// writeRuns cuts data into runs of at most runRecords records, sorts each
// stably by key and writes them to dir.
func writeRuns(t *testing.T, dir string, data []byte, runRecords int) []extsort.Run {
	t.Helper()
	var runs []extsort.Run
	for off, i := 0, 0; off < len(data); off, i = off+runRecords*record.Size, i+1 {
		chunk := data[off:min(off+runRecords*record.Size, len(data))]
		recs := make([][]byte, 0, len(chunk)/record.Size)
		for o := 0; o < len(chunk); o += record.Size {
			recs = append(recs, chunk[o:o+record.Size])
		}
		slices.SortStableFunc(recs, func(a, b []byte) int { return bytes.Compare(a[:record.KeySize], b[:record.KeySize]) })
		path := filepath.Join(dir, fmt.Sprintf("run%d", i))
		if err := os.WriteFile(path, bytes.Join(recs, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, extsort.Run{Path: path, Records: int64(len(recs))})
	}
	return runs
}

// TestBoundariesSplitEqualKeys checks the composite boundaries end to end
// without the network: 90% of records share a key, the sample is small, and
// yet every worker's share stays within 1.5x of the mean; partitions are
// ordered; and the cut of a worker's data does not depend on how it was cut
// into runs (so a restarted worker reproduces it).
func TestBoundariesSplitEqualKeys(t *testing.T) {
	const workers, perWorker, ppw = 3, 20000, 2
	rng := rand.New(rand.NewPCG(7, 8))
	hot := []byte("0123456789")
	dir := t.TempDir()
	var keys [][][]byte
	var recs []int64
	data := make([][]byte, workers)
	for w := range workers {
		data[w] = recordtest.Random(rng, perWorker, recordtest.Options{HotKey: hot, HotShare: 0.9})
		in := filepath.Join(dir, fmt.Sprint("in", w))
		if err := os.WriteFile(in, data[w], 0o644); err != nil {
			t.Fatal(err)
		}
		k, n, err := sampleInputs([]extsort.Input{{Path: in, Size: int64(len(data[w]))}}, 500)
		if err != nil {
			t.Fatal(err)
		}
		ks, err := splitSample(false, k)
		if err != nil {
			t.Fatal(err)
		}
		keys, recs = append(keys, ks), append(recs, n)
	}
	bounds := computeBoundaries(keys, recs, workers*ppw, false)
	if len(bounds) != workers*ppw-1 {
		t.Fatalf("%d boundaries, want %d", len(bounds), workers*ppw-1)
	}
	for i := 1; i < len(bounds); i++ {
		if compareBoundaries(bounds[i-1], bounds[i]) > 0 {
			t.Fatalf("boundaries %d and %d out of order", i-1, i)
		}
	}
	perPart := make([]int64, workers*ppw)
	minKey := make([][]byte, workers*ppw)
	maxKey := make([][]byte, workers*ppw)
	for w := range workers {
		var cuts [][]int64 // per layout: records per partition
		for _, runRecords := range []int{perWorker, 3000, 7000} {
			rd := filepath.Join(dir, fmt.Sprintf("w%d-%d", w, runRecords))
			os.Mkdir(rd, 0o755)
			runs := writeRuns(t, rd, data[w], runRecords)
			splits, err := runSplits(runs, bounds, w)
			if err != nil {
				t.Fatal(err)
			}
			counts := make([]int64, workers*ppw)
			for r, s := range splits {
				for p := range counts {
					counts[p] += (s[p+1] - s[p]) / record.Size
					if runRecords != perWorker || s[p+1] == s[p] {
						continue
					}
					f, _ := os.ReadFile(runs[r].Path)
					lo, hi := f[s[p]:][:record.KeySize], f[s[p+1]-record.Size:][:record.KeySize]
					if minKey[p] == nil || bytes.Compare(lo, minKey[p]) < 0 {
						minKey[p] = lo
					}
					if maxKey[p] == nil || bytes.Compare(hi, maxKey[p]) > 0 {
						maxKey[p] = hi
					}
				}
			}
			cuts = append(cuts, counts)
		}
		for _, c := range cuts[1:] {
			if d := cmp.Diff(cuts[0], c); d != "" {
				t.Fatalf("worker %d: the cut depends on the run layout (-one run +several):\n%s", w, d)
			}
		}
		for p, n := range cuts[0] {
			perPart[p] += n
		}
	}
	for p := 1; p < len(perPart); p++ {
		if maxKey[p-1] != nil && minKey[p] != nil && bytes.Compare(maxKey[p-1], minKey[p]) > 0 {
			t.Fatalf("partition %d holds a key above partition %d's smallest", p-1, p)
		}
	}
	mean := float64(workers*perWorker) / workers
	for w := range workers {
		got := perPart[w*ppw] + perPart[w*ppw+1]
		if float64(got) > 1.5*mean {
			t.Errorf("worker %d gets %d records, more than 1.5x the mean %.0f (partitions %v)", w, got, mean, perPart)
		}
	}
	t.Logf("records per partition: %v", perPart)
}

// TestSampleSpreadsOverAllInput: the sample reaches every file, not only the
// head of the first one.
func TestSampleSpreadsOverAllInput(t *testing.T) {
	dir := t.TempDir()
	var inputs []extsort.Input
	for i := range 4 {
		rec := bytes.Repeat([]byte{byte('a' + i)}, record.Size*250)
		path := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(path, rec, 0o644); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, extsort.Input{Path: path, Size: int64(len(rec))})
	}
	keys, n, err := sampleInputs(inputs, 8)
	if err != nil || n != 1000 {
		t.Fatalf("sampleInputs: %d records, %v", n, err)
	}
	var firsts []byte
	for i := 0; i < len(keys); i += record.KeySize {
		firsts = append(firsts, keys[i])
	}
	if d := cmp.Diff("aabbccdd", string(firsts)); d != "" {
		t.Fatal(d)
	}
}

// FuzzIsPartitionName: the output cleaner removes only partition.<digits>
// names (never partition.3x, never another file).
func FuzzIsPartitionName(f *testing.F) {
	for _, s := range []string{"partition.0", "partition.30", "partition.", "partition.3x", "partition.-1", "data", "partition.99999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := isPartitionName(name)
		n, ok := strings.CutPrefix(name, "partition.")
		want := ok && n != ""
		for _, c := range n {
			want = want && c >= '0' && c <= '9'
		}
		if got != want {
			t.Fatalf("isPartitionName(%q) = %v, want %v", name, got, want)
		}
	})
}
