package record

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// sortRecords sorts whole records by key, keeping ties in their order.
func sortRecords(buf []byte) []byte {
	recs := make([][]byte, len(buf)/Size)
	for i := range recs {
		recs[i] = buf[i*Size : (i+1)*Size]
	}
	slices.SortStableFunc(recs, func(a, b []byte) int { return CompareKeys(a, b) })
	return bytes.Join(recs, nil)
}

func swap(buf []byte, i, j int) {
	var t [Size]byte
	copy(t[:], buf[i*Size:])
	copy(buf[i*Size:(i+1)*Size], buf[j*Size:])
	copy(buf[j*Size:(j+1)*Size], t[:])
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// report prints s the way valsort 1.5 does (its stderr lines).
func report(s Summary) string {
	var b strings.Builder
	if s.FirstUnordered >= 0 {
		fmt.Fprintf(&b, "First unordered record is record %d\n", s.FirstUnordered)
	}
	fmt.Fprintf(&b, "Records: %d\nChecksum: %s\n", s.Records, s.Checksum)
	if s.Unordered > 0 {
		fmt.Fprintf(&b, "ERROR - there are %d unordered records\n", s.Unordered)
	} else {
		fmt.Fprintf(&b, "Duplicate keys: %d\nSUCCESS - all records are in order\n", s.Duplicates)
	}
	return b.String()
}

func TestValsortVectors(t *testing.T) {
	f, err := os.Open("testdata/valsort_vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	cases := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "case ") {
			continue
		}
		h := strings.Fields(line) // case kind form count status
		var want strings.Builder
		for sc.Scan() && sc.Text() != "end" {
			want.WriteString(sc.Text() + "\n")
		}
		cases++
		t.Run(strings.Join(h[1:4], "-"), func(t *testing.T) {
			n, _ := strconv.Atoi(h[3])
			opt := GenOptions{ASCII: strings.HasPrefix(h[2], "ascii"), Skew: strings.HasSuffix(h[2], "skew")}
			data := gen(n, 0, opt)
			switch h[1] {
			case "raw":
			case "sorted":
				data = sortRecords(data)
			case "sorted-x3":
				s := sortRecords(data)
				data = nil
				for i := 0; i < len(s); i += Size {
					for range 3 {
						data = append(data, s[i:i+Size]...)
					}
				}
			case "sorted-swap500":
				data = sortRecords(data)
				swap(data, 500, 501)
			default:
				t.Fatalf("unknown kind %q", h[1])
			}
			p := writeFile(t, t.TempDir(), "in", data)
			for _, workers := range []int{1, 2, 5} {
				s, err := Validate(t.Context(), []string{p}, ValidateOptions{Workers: workers, BlockSize: 7 * Size})
				if err != nil {
					t.Fatal(err)
				}
				if got := report(s); got != want.String() {
					t.Errorf("workers=%d: report\n%s\nvalsort said\n%s", workers, got, want.String())
				}
				if wantExit := h[4] == "1"; (s.Unordered > 0) != wantExit {
					t.Errorf("workers=%d: unordered=%d but valsort exit status %s", workers, s.Unordered, h[4])
				}
			}
		})
	}
	if cases < 8 {
		t.Fatalf("only %d valsort cases", cases)
	}
}

// naive is the obvious one-record-at-a-time validator the fast paths must
// agree with.
func naive(data []byte, checksumOnly bool) Summary {
	s := Summary{FirstUnordered: -1, ChecksumOnly: checksumOnly}
	for off := 0; off+Size <= len(data); off += Size {
		rec := data[off : off+Size]
		s.Checksum.Add(rec)
		if s.Records == 0 {
			s.FirstKey = bytes.Clone(rec[:KeySize])
		} else if !checksumOnly {
			switch CompareKeys(data[off-Size:], rec) {
			case 0:
				s.Duplicates++
			case 1:
				if s.Unordered == 0 {
					s.FirstUnordered = int64(s.Records)
				}
				s.Unordered++
			}
		}
		s.LastKey = bytes.Clone(rec[:KeySize])
		s.Records++
	}
	return s
}

func TestValidateCases(t *testing.T) {
	sorted := sortRecords(gen(1000, 0, GenOptions{}))
	allEqual := bytes.Repeat(sorted[:Size], 50)

	swapped := bytes.Clone(sorted)
	swap(swapped, 10, 11)

	for _, tc := range []struct {
		name  string
		files [][]byte // one sequence, cut into files
		want  Summary  // only the counts are compared; keys and checksum come from naive
	}{
		{"sorted one file", [][]byte{sorted}, Summary{Records: 1000, FirstUnordered: -1}},
		{"single swapped pair", [][]byte{swapped}, Summary{Records: 1000, Unordered: 1, FirstUnordered: 11}},
		{"all keys equal", [][]byte{allEqual}, Summary{Records: 50, Duplicates: 49, FirstUnordered: -1}},
		{"sorted over files", [][]byte{sorted[:300*Size], sorted[300*Size : 301*Size], nil, sorted[301*Size:]},
			Summary{Records: 1000, FirstUnordered: -1}},
		{"unordered across a file boundary", [][]byte{sorted[500*Size:], sorted[:500*Size]},
			Summary{Records: 1000, Unordered: 1, FirstUnordered: 500}},
		{"duplicate across a file boundary", [][]byte{sorted[:400*Size], sorted[399*Size:]},
			Summary{Records: 1001, Duplicates: 1, FirstUnordered: -1}},
		{"one record", [][]byte{sorted[:Size]}, Summary{Records: 1, FirstUnordered: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var paths []string
			for i, f := range tc.files {
				paths = append(paths, writeFile(t, dir, fmt.Sprintf("f%d", i), f))
			}
			want := naive(bytes.Join(tc.files, nil), false)
			if want.Records != tc.want.Records || want.Duplicates != tc.want.Duplicates ||
				want.Unordered != tc.want.Unordered || want.FirstUnordered != tc.want.FirstUnordered {
				t.Fatalf("test expectation %+v disagrees with the naive validator %+v", tc.want, want)
			}
			for _, workers := range []int{1, 2, 3, 16} {
				for _, block := range []int{Size, 3 * Size, 0} {
					got, err := Validate(t.Context(), paths, ValidateOptions{Workers: workers, BlockSize: block})
					if err != nil {
						t.Fatal(err)
					}
					if d := cmp.Diff(want, got); d != "" {
						t.Errorf("workers=%d block=%d (-want +got):\n%s", workers, block, d)
					}
				}
			}
			// The one-pass path (used for pipes) agrees too.
			got, err := validateStream(t.Context(), paths, ValidateOptions{BlockSize: 3 * Size})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("stream (-want +got):\n%s", d)
			}
			// So does each file read as a stream on its own, the summaries
			// combined in order (how valsort reads objects of a store).
			var parts []Summary
			for i, f := range tc.files {
				s, err := ValidateReader(t.Context(), paths[i], iotest.HalfReader(bytes.NewReader(f)), ValidateOptions{BlockSize: 3 * Size})
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, s)
			}
			if got, err = Combine(parts); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("ValidateReader + Combine (-want +got):\n%s", d)
			}
		})
	}
}

func TestValidateChecksumOnly(t *testing.T) {
	data := gen(2000, 5, GenOptions{})
	p := writeFile(t, t.TempDir(), "in", data)
	got, err := Validate(t.Context(), []string{p}, ValidateOptions{ChecksumOnly: true, BlockSize: 11 * Size})
	if err != nil {
		t.Fatal(err)
	}
	want := naive(data, true)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	// Sorting does not change the checksum.
	p2 := writeFile(t, t.TempDir(), "out", sortRecords(data))
	got2, err := Validate(t.Context(), []string{p2}, ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got2.Checksum != got.Checksum || got2.Records != got.Records || !got2.Sorted() {
		t.Errorf("sorted output %+v does not match input %+v", got2, got)
	}
}

func TestValidatePartialRecord(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good", gen(10, 0, GenOptions{}))
	bad := writeFile(t, dir, "bad", gen(10, 10, GenOptions{})[:950])
	for _, paths := range [][]string{{bad}, {good, bad}} {
		_, err := Validate(t.Context(), paths, ValidateOptions{})
		var pe *PartialRecordError
		if !errors.Is(err, ErrPartialRecord) || !errors.As(err, &pe) || pe.Path != bad || pe.Size != 950 {
			t.Fatalf("Validate(%v) err = %v, want a PartialRecordError for %s of 950 bytes", paths, err, bad)
		}
		if !strings.Contains(err.Error(), "partial record found at end") || !strings.Contains(err.Error(), "50 bytes over") {
			t.Errorf("message %q", err)
		}
		_, err = validateStream(t.Context(), paths, ValidateOptions{BlockSize: 300})
		if !errors.As(err, &pe) || pe.Size != 950 {
			t.Errorf("stream: err = %v", err)
		}
	}
	data, _ := os.ReadFile(bad)
	_, err := ValidateReader(t.Context(), "s3://b/bad", bytes.NewReader(data), ValidateOptions{})
	var pe *PartialRecordError
	if !errors.As(err, &pe) || pe.Path != "s3://b/bad" || pe.Size != 950 {
		t.Errorf("ValidateReader: err = %v, want a PartialRecordError for s3://b/bad of 950 bytes", err)
	}
	// A read error is returned with the stream's name.
	boom := errors.New("connection reset")
	_, err = ValidateReader(t.Context(), "s3://b/x", io.MultiReader(bytes.NewReader(data[:500]), iotest.ErrReader(boom)), ValidateOptions{})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "s3://b/x") {
		t.Errorf("ValidateReader on a failing reader: err = %v", err)
	}
	// One whole record, in the singular.
	for size, want := range map[int64]string{150: "150 bytes is 1 whole 100-byte record and 50 bytes over",
		50: "50 bytes is 0 whole 100-byte records and 50 bytes over", 950: "950 bytes is 9 whole 100-byte records and 50 bytes over"} {
		if got := (&PartialRecordError{Path: "f", Size: size}).Error(); got != "f: partial record found at end: "+want {
			t.Errorf("%d bytes: %q, want %q", size, got, want)
		}
	}
}

func TestValidateEmptyAndUnreadable(t *testing.T) {
	dir := t.TempDir()
	empty := writeFile(t, dir, "empty", nil)
	s, err := Validate(t.Context(), []string{empty, empty}, ValidateOptions{})
	if err != nil || s.Records != 0 || s.FirstUnordered != -1 || s.Checksum != (Checksum{}) {
		t.Errorf("empty input: %+v, %v", s, err)
	}
	if _, err := Validate(t.Context(), []string{filepath.Join(dir, "missing")}, ValidateOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
	if os.Geteuid() != 0 { // root reads anything
		locked := writeFile(t, dir, "locked", gen(5, 0, GenOptions{}))
		os.Chmod(locked, 0)
		if _, err := Validate(t.Context(), []string{locked}, ValidateOptions{}); !errors.Is(err, os.ErrPermission) {
			t.Errorf("unreadable file: err = %v", err)
		}
	}
}

func TestValidateCanceled(t *testing.T) {
	p := writeFile(t, t.TempDir(), "in", gen(5000, 0, GenOptions{}))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Validate(ctx, []string{p}, ValidateOptions{BlockSize: Size}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestValidatePipe(t *testing.T) {
	data := sortRecords(gen(3000, 0, GenOptions{ASCII: true}))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := w.Write(data)
		w.Close()
		done <- err
	}()
	path := fmt.Sprintf("/proc/self/fd/%d", r.Fd())
	got, err := Validate(t.Context(), []string{path}, ValidateOptions{BlockSize: 1000})
	r.Close()
	if werr := <-done; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(naive(data, false), got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestExpandPaths(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	for _, n := range []int{30, 3, 0, 100, 4} {
		writeFile(t, out, fmt.Sprintf("partition.%d", n), nil)
	}
	single := writeFile(t, dir, "single", nil)
	got, err := ExpandPaths([]string{single, out})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, filepath.Base(p))
	}
	if want := "single partition.0 partition.3 partition.4 partition.30 partition.100"; strings.Join(names, " ") != want {
		t.Errorf("got %v, want %s", names, want)
	}

	for _, stray := range []string{"notes.txt", "partition.x", "partition.03", "partition.-1", "partition.", ".partition.3.123.partial"} {
		t.Run(stray, func(t *testing.T) {
			d := t.TempDir()
			writeFile(t, d, "partition.1", nil)
			writeFile(t, d, stray, nil)
			_, err := ExpandPaths([]string{d})
			if err == nil || !strings.Contains(err.Error(), stray) {
				t.Errorf("err = %v, want one naming %s", err, stray)
			}
		})
	}
	d := t.TempDir()
	os.Mkdir(filepath.Join(d, "partition.2"), 0o755)
	if _, err := ExpandPaths([]string{d}); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("subdirectory: err = %v", err)
	}
	if _, err := ExpandPaths([]string{filepath.Join(dir, "nope")}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: err = %v", err)
	}
	// An empty directory is no files, not an error.
	if got, err := ExpandPaths([]string{t.TempDir()}); err != nil || len(got) != 0 {
		t.Errorf("empty dir: %v, %v", got, err)
	}
}

// TestExpandInputPaths: a directory of an input set gives all its files in
// name order, whatever their names; plain files stay where they were given.
func TestExpandInputPaths(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	os.Mkdir(in, 0o755)
	for _, n := range []string{"b.dat", "a", "partition.10", "partition.9"} {
		writeFile(t, in, n, nil)
	}
	single := writeFile(t, dir, "single", nil)
	got, err := ExpandInputPaths([]string{in, single})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, filepath.Base(p))
	}
	if want := "a b.dat partition.10 partition.9 single"; strings.Join(names, " ") != want {
		t.Errorf("got %v, want %s", names, want)
	}
	os.Mkdir(filepath.Join(in, "sub"), 0o755)
	if _, err := ExpandInputPaths([]string{in}); err == nil || !strings.Contains(err.Error(), "sub is a directory") {
		t.Errorf("subdirectory: err = %v, want one naming sub", err)
	}
	if _, err := ExpandInputPaths([]string{filepath.Join(dir, "nope")}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: err = %v", err)
	}
}

func TestValidateDirectories(t *testing.T) {
	// Two "workers'" output directories; partition.10 must come after
	// partition.9, which a string sort would get wrong — and the data is
	// only sorted in numeric order.
	data := sortRecords(gen(1200, 0, GenOptions{}))
	root := t.TempDir()
	w1, w2 := filepath.Join(root, "w1"), filepath.Join(root, "w2")
	os.Mkdir(w1, 0o755)
	os.Mkdir(w2, 0o755)
	for p := range 12 {
		dir := w1
		if p >= 6 {
			dir = w2
		}
		writeFile(t, dir, fmt.Sprintf("partition.%d", p+5), data[p*100*Size:(p+1)*100*Size])
	}
	got, err := Validate(t.Context(), []string{w1, w2}, ValidateOptions{Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(naive(data, false), got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	// Swapping the directories breaks order exactly once, at the seam.
	got, err = Validate(t.Context(), []string{w2, w1}, ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Unordered != 1 || got.FirstUnordered != 600 {
		t.Errorf("swapped dirs: unordered %d first %d, want 1 at 600", got.Unordered, got.FirstUnordered)
	}
}

func TestValidateChecksumOnlyInputDir(t *testing.T) {
	// Input directories hold files of any name; --checksum-only takes them all.
	dir := t.TempDir()
	a, b := gen(30, 0, GenOptions{}), gen(20, 30, GenOptions{})
	writeFile(t, dir, "block-b", b)
	writeFile(t, dir, "a.dat", a)
	got, err := Validate(t.Context(), []string{dir}, ValidateOptions{ChecksumOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := naive(append(bytes.Clone(a), b...), true); got.Checksum != want.Checksum || got.Records != 50 {
		t.Errorf("got %+v, want %+v", got, want)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if _, err := Validate(t.Context(), []string{dir}, ValidateOptions{ChecksumOnly: true}); err == nil || !strings.Contains(err.Error(), "sub") {
		t.Errorf("subdirectory: err = %v", err)
	}
}
