package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzValidate feeds arbitrary bytes to the record reader/validator, cut into
// up to three files at fuzzed points, with fuzzed worker counts and block
// sizes, and checks it against the naive one-record-at-a-time validator. A
// file whose length is not a whole number of records must be reported as a
// partial record, naming that file.
func FuzzValidate(f *testing.F) {
	sorted := sortRecords(gen(20, 0, GenOptions{}))
	f.Add(sorted, uint16(700), uint16(1300), uint8(2), uint8(1))
	f.Add(gen(20, 0, GenOptions{ASCII: true}), uint16(0), uint16(2000), uint8(3), uint8(0))
	f.Add(bytes.Repeat([]byte{7}, 1000), uint16(500), uint16(500), uint8(1), uint8(5))
	f.Add(sorted[:250], uint16(100), uint16(200), uint8(4), uint8(2))
	f.Add([]byte{}, uint16(0), uint16(0), uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint16, workers, block uint8) {
		if len(data) > 64*Size {
			data = data[:64*Size]
		}
		a := min(int(cut1), len(data))
		b := min(max(int(cut2), a), len(data))
		files := [][]byte{data[:a], data[a:b], data[b:]}
		dir := t.TempDir()
		var paths []string
		partial := ""
		for i, fb := range files {
			p := writeFile(t, dir, fmt.Sprintf("f%d", i), fb)
			paths = append(paths, p)
			if len(fb)%Size != 0 && partial == "" {
				partial = p
			}
		}
		opt := ValidateOptions{Workers: int(workers%8) + 1, BlockSize: (int(block%9) + 1) * Size, ChecksumOnly: workers&0x80 != 0}
		got, err := Validate(t.Context(), paths, opt)
		if partial != "" {
			var pe *PartialRecordError
			if !errors.As(err, &pe) || pe.Path != partial {
				t.Fatalf("want a partial record error for %s, got %v", filepath.Base(partial), err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(naive(data, opt.ChecksumOnly), got); d != "" {
			t.Fatalf("%+v (-naive +Validate):\n%s", opt, d)
		}
		if err := got.Check(); err != nil {
			t.Fatalf("result fails Check: %v", err)
		}
	})
}

// FuzzParseSummaries feeds arbitrary bytes to the summary parser. It must not
// panic; whatever it accepts must satisfy Summary's invariants, survive a
// marshal/parse round trip unchanged, and combine without error into a
// summary that satisfies them too.
func FuzzParseSummaries(f *testing.F) {
	s1 := naive(sortRecords(gen(10, 0, GenOptions{})), false)
	s2 := naive(gen(10, 10, GenOptions{}), false)
	j1, _ := json.Marshal(s1)
	j2, _ := json.Marshal(s2)
	f.Add(j1)
	f.Add(append(append(append([]byte{}, j1...), '\n'), j2...))
	f.Add([]byte("[" + string(j1) + "," + string(j2) + "]"))
	f.Add([]byte(`{"records":0,"checksum":"0"}`))
	f.Add([]byte(`{"records":18446744073709551615,"checksum":"ffffffff","first_key":"00000000000000000000","last_key":"00000000000000000000","duplicates":18446744073709551614}`))
	f.Add([]byte(`{"records":3,"unordered":1,"first_unordered":2,"checksum":"1","first_key":"ff000000000000000000","last_key":"00000000000000000000"}`))
	f.Add([]byte(`{"records":5,"checksum":"5","first_key":"00000000000000000000","last_key":"00000000000000000000","checksum_only":true}`))
	f.Add([]byte(`garbage`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sums, err := ParseSummaries(data)
		if err != nil {
			return
		}
		for i, s := range sums {
			if err := s.Check(); err != nil {
				t.Fatalf("summary %d accepted but fails Check: %v", i, err)
			}
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseSummaries(b)
			if err != nil || len(back) != 1 {
				t.Fatalf("re-parse of %s: %v", b, err)
			}
			if d := cmp.Diff(s, back[0]); d != "" {
				t.Fatalf("round trip (-first +second):\n%s", d)
			}
		}
		c, err := Combine(sums)
		if err != nil {
			// Only a record count past what fits may fail.
			return
		}
		if err := c.Check(); err != nil {
			t.Fatalf("combined summary fails Check: %v", err)
		}
	})
}
