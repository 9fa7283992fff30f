package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCombineMatchesWholeValidation(t *testing.T) {
	// Validating pieces and combining their summaries gives what validating
	// the concatenation gives, for every way of cutting it.
	sorted := sortRecords(gen(600, 0, GenOptions{Skew: true}))
	broken := bytes.Clone(sorted)
	swap(broken, 299, 300) // right at a cut below
	dup := append(bytes.Clone(sorted[:300*Size]), sorted[299*Size:]...)
	for name, data := range map[string][]byte{"sorted": sorted, "broken": broken, "dup": dup, "raw": gen(600, 0, GenOptions{})} {
		n := len(data) / Size
		for _, cuts := range [][]int{{300}, {1, 2, 3}, {0, 0, 300, 300, n}, {100, 299, 301, 599}} {
			var parts []Summary
			prev := 0
			for _, c := range append(cuts, n) {
				parts = append(parts, naive(data[prev*Size:c*Size], false))
				prev = c
			}
			got, err := Combine(parts)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(naive(data, false), got); d != "" {
				t.Errorf("%s cut at %v (-whole +combined):\n%s", name, cuts, d)
			}
		}
	}
}

func TestCombineCases(t *testing.T) {
	k := func(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }
	part := func(n uint64, first, last byte) Summary {
		return Summary{Records: n, FirstUnordered: -1, Checksum: Checksum{0, n}, FirstKey: k(first), LastKey: k(last)}
	}
	bad := part(10, 1, 2)
	bad.Unordered = 1
	bad.FirstUnordered = 4
	co := part(5, 9, 1)
	co.ChecksumOnly = true
	for _, tc := range []struct {
		name  string
		parts []Summary
		want  Summary
	}{
		{"none", nil, Summary{FirstUnordered: -1}},
		{"empties", []Summary{{FirstUnordered: -1}, {FirstUnordered: -1}}, Summary{FirstUnordered: -1}},
		{"in order", []Summary{part(2, 1, 2), {FirstUnordered: -1}, part(3, 3, 4)},
			Summary{Records: 5, FirstUnordered: -1, Checksum: Checksum{0, 5}, FirstKey: k(1), LastKey: k(4)}},
		{"equal seam", []Summary{part(2, 1, 2), part(3, 2, 4)},
			Summary{Records: 5, Duplicates: 1, FirstUnordered: -1, Checksum: Checksum{0, 5}, FirstKey: k(1), LastKey: k(4)}},
		{"broken seam", []Summary{part(2, 1, 5), part(3, 2, 4), part(1, 3, 3)},
			Summary{Records: 6, Unordered: 2, FirstUnordered: 2, Checksum: Checksum{0, 6}, FirstKey: k(1), LastKey: k(3)}},
		{"first unordered inside a later part", []Summary{part(7, 0, 0), bad},
			Summary{Records: 17, Unordered: 1, FirstUnordered: 11, Checksum: Checksum{0, 17}, FirstKey: k(0), LastKey: k(2)}},
		{"checksum-only part", []Summary{part(2, 5, 6), co},
			Summary{Records: 7, FirstUnordered: -1, Checksum: Checksum{0, 7}, FirstKey: k(5), LastKey: k(1), ChecksumOnly: true}},
	} {
		got, err := Combine(tc.parts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if d := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
		if err := got.Check(); err != nil {
			t.Errorf("%s: combined summary fails Check: %v", tc.name, err)
		}
	}
	if _, err := Combine([]Summary{part(2, 1, 2), {Records: 1}}); !errors.Is(err, ErrBadSummary) {
		t.Errorf("invalid part: err = %v", err)
	}
}

func TestSummaryJSONRoundTrip(t *testing.T) {
	data := gen(100, 0, GenOptions{})
	for _, s := range []Summary{naive(data, false), naive(sortRecords(data), false), naive(data, true), naive(nil, false)} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Summary
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if d := cmp.Diff(s, back); d != "" {
			t.Errorf("round trip of %s (-want +got):\n%s", b, d)
		}
	}
	b, _ := json.Marshal(naive(sortRecords(data[:2*Size]), false))
	for _, field := range []string{`"records":2`, `"duplicates":0`, `"unordered":0`, `"first_unordered":-1`, `"checksum":"`, `"first_key":"`, `"last_key":"`} {
		if !bytes.Contains(b, []byte(field)) {
			t.Errorf("%s lacks %s", b, field)
		}
	}
}

func TestParseSummariesRejects(t *testing.T) {
	ok := `{"records":2,"duplicates":0,"unordered":0,"first_unordered":-1,"checksum":"1a","first_key":"00000000000000000000","last_key":"00000000000000000001"}`
	if _, err := ParseSummaries([]byte(ok)); err != nil {
		t.Fatalf("valid summary rejected: %v", err)
	}
	for _, tc := range []struct{ name, in string }{
		{"not json", `hello`},
		{"no records", `{"checksum":"0"}`},
		{"no checksum", `{"records":0}`},
		{"bad checksum", `{"records":1,"checksum":"zz","first_key":"00000000000000000000","last_key":"00000000000000000000"}`},
		{"short key", `{"records":1,"checksum":"1","first_key":"00","last_key":"00"}`},
		{"bad hex key", `{"records":1,"checksum":"1","first_key":"0000000000000000000g","last_key":"00000000000000000000"}`},
		{"too many dups", `{"records":2,"duplicates":2,"checksum":"1","first_key":"00000000000000000000","last_key":"00000000000000000000"}`},
		{"unordered without first", `{"records":3,"unordered":1,"checksum":"1","first_key":"00000000000000000000","last_key":"00000000000000000000"}`},
		{"first unordered 0", `{"records":3,"unordered":1,"first_unordered":0,"checksum":"1","first_key":"00000000000000000000","last_key":"00000000000000000000"}`},
		{"first unordered past end", `{"records":3,"unordered":1,"first_unordered":3,"checksum":"1","first_key":"00000000000000000000","last_key":"00000000000000000000"}`},
		{"first unordered but sorted", `{"records":3,"first_unordered":1,"checksum":"1","first_key":"00000000000000000000","last_key":"00000000000000000000"}`},
		{"checksum too big", `{"records":1,"checksum":"100000000","first_key":"00000000000000000000","last_key":"00000000000000000000"}`},
		{"empty with keys", `{"records":0,"checksum":"0","first_key":"00000000000000000000"}`},
		{"sorted but first > last", `{"records":2,"checksum":"1","first_key":"01000000000000000000","last_key":"00000000000000000000"}`},
		{"trailing garbage", ok + `]`},
		{"negative records", `{"records":-1,"checksum":"0"}`},
	} {
		if _, err := ParseSummaries([]byte(tc.in)); err == nil {
			t.Errorf("%s: accepted %s", tc.name, tc.in)
		}
	}
}

func TestParseSummariesForms(t *testing.T) {
	a := naive(sortRecords(gen(10, 0, GenOptions{})), false)
	b := naive(sortRecords(gen(10, 10, GenOptions{})), false)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	for name, in := range map[string]string{
		"concatenated": string(ja) + "\n" + string(jb) + "\n",
		"array":        "[" + string(ja) + "," + string(jb) + "]",
		"no newline":   string(ja) + string(jb),
	} {
		got, err := ParseSummaries([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := cmp.Diff([]Summary{a, b}, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", name, d)
		}
	}
	if got, err := ParseSummaries([]byte("  \n")); err != nil || len(got) != 0 {
		t.Errorf("blank: %v, %v", got, err)
	}
}

func TestSummaryFilesEndToEnd(t *testing.T) {
	// The valsort -o / -s workflow: validate each worker's output on its own,
	// then check the summaries in order.
	dir := t.TempDir()
	data := sortRecords(gen(900, 0, GenOptions{ASCII: true}))
	var sums []string
	for w := range 3 {
		p := writeFile(t, dir, fmt.Sprintf("out%d", w), data[w*300*Size:(w+1)*300*Size])
		s, err := Validate(t.Context(), []string{p}, ValidateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sp := filepath.Join(dir, fmt.Sprintf("out%d.sum", w))
		if err := WriteSummaryFile(sp, s); err != nil {
			t.Fatal(err)
		}
		sums = append(sums, sp)
	}
	parts, from, err := ReadSummaryFiles(sums)
	if err != nil {
		t.Fatal(err)
	}
	if len(from) != 3 || from[2] != sums[2] {
		t.Errorf("from = %v", from)
	}
	got, err := Combine(parts)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(naive(data, false), got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	// In the wrong order the seam shows.
	parts, _, _ = ReadSummaryFiles([]string{sums[1], sums[0], sums[2]})
	got, _ = Combine(parts)
	if got.Unordered != 1 || got.FirstUnordered != 300 {
		t.Errorf("out of order: %+v", got)
	}
	// A file that is not a summary is named in the error.
	junk := writeFile(t, dir, "junk.sum", []byte("not json"))
	if _, _, err := ReadSummaryFiles([]string{sums[0], junk}); err == nil || !strings.Contains(err.Error(), junk) {
		t.Errorf("junk: err = %v", err)
	}
	emptyFile := writeFile(t, dir, "empty.sum", nil)
	if _, _, err := ReadSummaryFiles([]string{emptyFile}); err == nil {
		t.Error("empty summary file accepted")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 8 {
		t.Errorf("%d files in dir, want 8 (no temp files left)", len(ents))
	}
}

func TestLocate(t *testing.T) {
	counts := []uint64{3, 0, 2, 5}
	for _, tc := range []struct {
		idx  int64
		part int
		off  uint64
		ok   bool
	}{{0, 0, 0, true}, {2, 0, 2, true}, {3, 2, 0, true}, {5, 3, 0, true}, {9, 3, 4, true}, {10, 0, 0, false}, {-1, 0, 0, false}} {
		p, o, ok := Locate(counts, tc.idx)
		if p != tc.part || o != tc.off || ok != tc.ok {
			t.Errorf("Locate(%d) = %d, %d, %v; want %d, %d, %v", tc.idx, p, o, ok, tc.part, tc.off, tc.ok)
		}
	}
}
