package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/testutil"

	"github.com/gantryhq/gantry/record"
)

// runRecordCmd runs one gantry command line and returns its exit status and
// output streams.
func runRecordCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Execute(t.Context(), Env{Args: args, Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestGensortCmdMatchesGensort(t *testing.T) {
	// sha256 and checksum of gensort 1.5's output (record/testdata/gensort_vectors.txt).
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		sha  string
		sum  string
	}{
		{[]string{"1000"}, "f524474116510d1debac6d38152e793a7e3cb71b1dd2bb45b6610e3c17698177", "1ea6370b955"},
		{[]string{"-a", "1000"}, "6c26b26a61464dd78038f9c60907c851ac043c07584b12835fe065cbca31aad2", "1f5dfb3631a"},
		{[]string{"-s", "1000"}, "e29ce5d551d332a974d978a4a4b3535efcd5df559328fe4ee11bf7f481269444", "1e96301166b"},
		{[]string{"-as", "1000"}, "33dc462ab1da5ddedecf127d65c8856b59baec45a15b91f79aafd116514ac65e", "1eef17d1cac"},
		{[]string{"-b10000000000", "1000"}, "98c7165127cf35cfa010a128628a3c6b22f7dcae21c27d217c63801e3c2d7594", "1ffb291a0d2"},
		{[]string{"-b", "1000", "-s", "100"}, "e60e11fa6e574ce93f6961801071592616b2baa29935c86743b0af60b8441a3b", "2f7092ae26"},
	} {
		out := filepath.Join(dir, "out")
		args := append(append([]string{"gensort", "-q", "-c"}, tc.args...), out)
		code, stdout, stderr := runRecordCmd(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if got := fileSHA(t, out); got != tc.sha {
			t.Errorf("%v: sha256 %s, gensort's %s", tc.args, got, tc.sha)
		}
		if stderr != tc.sum+"\n" || stdout != "" {
			t.Errorf("%v: stderr %q stdout %q, want only the checksum %q on stderr", tc.args, stderr, stdout, tc.sum)
		}
	}
	// With -v a speed line comes first and the checksum stays last.
	code, _, stderr := runRecordCmd(t, "gensort", "-v", "-c", "1000", filepath.Join(dir, "x"))
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != 0 || lines[len(lines)-1] != "1ea6370b955" || !strings.HasPrefix(lines[0], "gensort: 100.0 kB in ") {
		t.Errorf("-v: exit %d, stderr %q", code, stderr)
	}
}

func TestGensortCmdParts(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "in")
	code, _, stderr := runRecordCmd(t, "gensort", "-q", "-c", "-b", "5", "--parts", "3", "1000", base)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got []byte
	for _, p := range []string{"in.0000", "in.0001", "in.0002"} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b...)
	}
	want := make([]byte, 1000*record.Size)
	record.Generate(want, 5, record.GenOptions{})
	var sum record.Checksum
	sum.AddAll(want)
	if !bytes.Equal(got, want) {
		t.Error("the parts concatenated differ from one gensort -b5 1000 run")
	}
	if stderr != sum.String()+"\n" {
		t.Errorf("stderr %q, want the checksum of all parts %s", stderr, sum)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("%d files, want 3", len(ents))
	}
}

func TestGensortCmdBadArgs(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gensort", "abc", f}, `NUM_RECORDS "abc": want a non-negative whole number`},
		{[]string{"gensort", "--", "-5", f}, `NUM_RECORDS "-5"`},
		{[]string{"gensort", "10M", f}, `NUM_RECORDS "10M"`},
		{[]string{"gensort", "99999999999999999999999", f}, "too large"},
		{[]string{"gensort", "10"}, "accepts 2 arg(s), received 1"},
		{[]string{"gensort", "-bxyz", "10", f}, `-b "xyz"`},
		{[]string{"gensort", "-b18446744073709551615", "2", f}, "pass 2^64-1"},
		{[]string{"gensort", "--parts", "0", "10", f}, "--parts 0"},
		{[]string{"gensort", "-t", "-1", "10", f}, "--threads -1"},
		{[]string{"gensort", "10", filepath.Join(dir, "no", "dir", "f")}, "directory " + filepath.Join(dir, "no", "dir") + " does not exist"},
		{[]string{"gensort", "10", dir}, "is a directory"},
	} {
		code, _, stderr := runRecordCmd(t, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want non-zero and %q", tc.args, code, stderr, tc.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed runs left %d files", len(ents))
	}
}

// sortedRecords returns n generated records sorted by key.
func sortedRecords(n int, first uint64) []byte {
	b := make([]byte, n*record.Size)
	record.Generate(b, first, record.GenOptions{})
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = b[i*record.Size : (i+1)*record.Size]
	}
	slices.SortFunc(recs, record.CompareKeys)
	return bytes.Join(recs, nil)
}

func TestValsortCmd(t *testing.T) {
	dir := t.TempDir()
	data := sortedRecords(1000, 0)
	var sum record.Checksum
	sum.AddAll(data)

	sorted := filepath.Join(dir, "sorted")
	testutil.WriteRecords(t, sorted, data)
	raw := filepath.Join(dir, "raw")
	if code, _, e := runRecordCmd(t, "gensort", "-q", "1000", raw); code != 0 {
		t.Fatal(e)
	}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	testutil.WriteRecords(t, filepath.Join(out, "partition.3"), data[:400*record.Size])
	testutil.WriteRecords(t, filepath.Join(out, "partition.30"), data[400*record.Size:])
	swapped := filepath.Join(dir, "swapped")
	os.Mkdir(swapped, 0o755)
	testutil.WriteRecords(t, filepath.Join(swapped, "partition.0"), data[400*record.Size:])
	testutil.WriteRecords(t, filepath.Join(swapped, "partition.1"), data[:400*record.Size])
	partial := filepath.Join(dir, "partial")
	testutil.WriteRecords(t, partial, data[:250])
	empty := filepath.Join(dir, "empty")
	testutil.WriteRecords(t, empty, nil)
	stray := filepath.Join(dir, "stray")
	os.Mkdir(stray, 0o755)
	testutil.WriteRecords(t, filepath.Join(stray, "partition.0"), data)
	testutil.WriteRecords(t, filepath.Join(stray, "README"), nil)

	success := fmt.Sprintf("Records: 1000\nChecksum: %s\nDuplicate keys: 0\nSUCCESS - all records are in order\n", sum)
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		report    string // exact, if set
		reportHas string
		onStdout  bool // gantry's own forms (directories, several inputs, --checksum-only)
		stderrHas string
	}{
		{"sorted file", []string{sorted}, 0, success, "", false, ""},
		{"directory in numeric order", []string{out}, 0, success, "", true, ""},
		{"unsorted", []string{raw}, 1, "First unordered record is record 2\nRecords: 1000\nChecksum: 1ea6370b955\nERROR - there are 483 unordered records\n", "", false, ""},
		{"unordered at a file boundary", []string{swapped}, 1, "", "First unordered record is record 600\n  (the first record of " + filepath.Join(swapped, "partition.1"), true, ""},
		{"checksum only", []string{"--checksum-only", raw}, 0, "Records: 1000\nChecksum: 1ea6370b955\n", "", true, ""},
		{"quiet", []string{"-q", raw}, 1, "", "", false, ""},
		{"verbose adds the speed line first", []string{"-v", sorted}, 0, "", "", false, "valsort: 100.0 kB in "},
		{"partial record", []string{sorted, partial}, 1, "", "", true, "partial record found at end: 250 bytes is 2 whole 100-byte records and 50 bytes over"},
		{"empty", []string{empty}, 1, "", "", false, "there must be at least one record to be validated: " + empty + " holds no records"},
		{"empty allowed", []string{"--allow-empty", empty}, 0, "Records: 0\nChecksum: 0\nDuplicate keys: 0\nSUCCESS - all records are in order\n", "", false, ""},
		{"missing", []string{filepath.Join(dir, "nope")}, 1, "", "", true, "no such file or directory"},
		{"stray file in a directory", []string{stray}, 1, "", "", true, filepath.Join(stray, "README") + ": not a partition.<n> file"},
		{"no args", nil, 1, "", "", true, "requires at least 1 arg"},
		{"-s with --checksum-only", []string{"-s", "--checksum-only", sorted}, 1, "", "", true, "do not go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runRecordCmd(t, append([]string{"valsort"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			report, other := stderr, stdout
			if tc.onStdout {
				report, other = stdout, stderr
			}
			if tc.report != "" && report != tc.report {
				t.Errorf("report\n%s\nwant\n%s", report, tc.report)
			}
			if !strings.Contains(report, tc.reportHas) {
				t.Errorf("report %q lacks %q", report, tc.reportHas)
			}
			if !tc.onStdout && stdout != "" {
				t.Errorf("stdout %q, want nothing (valsort 1.5 reports on stderr)", stdout)
			}
			if tc.onStdout && tc.stderrHas == "" && other != "" {
				t.Errorf("stderr %q, want nothing", other)
			}
			if !strings.Contains(stderr, tc.stderrHas) {
				t.Errorf("stderr %q lacks %q", stderr, tc.stderrHas)
			}
			if tc.name == "quiet" && stderr+stdout != "" {
				t.Errorf("-q: printed %q %q, want nothing", stdout, stderr)
			}
		})
	}
}

func TestValsortCmdSummaries(t *testing.T) {
	// Each "machine" validates its own output with -o; -s checks the
	// summaries in order.
	dir := t.TempDir()
	data := sortedRecords(900, 0)
	var sums []string
	for w := range 3 {
		p := filepath.Join(dir, fmt.Sprintf("w%d", w))
		testutil.WriteRecords(t, p, data[w*300*record.Size:(w+1)*300*record.Size])
		s := p + ".sum"
		if code, _, e := runRecordCmd(t, "valsort", "-q", "-o", s, p); code != 0 {
			t.Fatalf("valsort -o: %s", e)
		}
		sums = append(sums, s)
	}
	var sum record.Checksum
	sum.AddAll(data)
	code, stdout, stderr := runRecordCmd(t, append([]string{"valsort", "-s"}, sums...)...)
	want := fmt.Sprintf("Records: 900\nChecksum: %s\nDuplicate keys: 0\nSUCCESS - all records are in order\n", sum)
	if code != 0 || stdout != want || stderr != "" {
		t.Errorf("-s in order: exit %d\nstdout %s\nstderr %q", code, stdout, stderr)
	}
	// valsort's own workflow: concatenate the summaries into one file.
	var all []byte
	for _, s := range sums {
		b, _ := os.ReadFile(s)
		all = append(all, b...)
	}
	allPath := filepath.Join(dir, "all.sum")
	os.WriteFile(allPath, all, 0o644)
	if code, _, stderr := runRecordCmd(t, "valsort", "-s", allPath); code != 0 || stderr != want {
		t.Errorf("-s all.sum: exit %d\n%s", code, stderr)
	}
	// Out of order: the seam between the first two summaries breaks.
	code, stdout, _ = runRecordCmd(t, "valsort", "-s", sums[1], sums[0], sums[2])
	if code != 1 || !strings.HasPrefix(stdout, "First unordered record is record 300\n") ||
		!strings.Contains(stdout, "ERROR - there are 1 unordered records") {
		t.Errorf("-s out of order: exit %d\n%s", code, stdout)
	}
	// A records file given to -s is a clear error.
	code, _, stderr = runRecordCmd(t, "valsort", "-s", filepath.Join(dir, "w0"))
	if code != 1 || !strings.Contains(stderr, filepath.Join(dir, "w0")) {
		t.Errorf("-s on records: exit %d, %q", code, stderr)
	}
}

func TestGensortCmdInterrupted(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // as if Ctrl-C arrived at once
	var out, errb bytes.Buffer
	code := Execute(ctx, Env{Args: []string{"gensort", "1000000", filepath.Join(dir, "f")}, Stdout: &out, Stderr: &errb})
	if code != 130 || !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("exit %d, stderr %q; want 130 and 'interrupted'", code, errb.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("interrupted run left %d files", len(ents))
	}
}
