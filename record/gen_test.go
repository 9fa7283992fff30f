package record

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// readFields returns the non-comment lines of a testdata file split into fields.
func readFields(t *testing.T, name string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rows = append(rows, strings.Fields(line))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

func gen(n int, first uint64, opt GenOptions) []byte {
	b := make([]byte, n*Size)
	Generate(b, first, opt)
	return b
}

func TestRecordZeroKey(t *testing.T) {
	// dsort notes §2: record 0's key is "JimGrayRIP", the LCG's constant c.
	got := hex.EncodeToString(gen(1, 0, GenOptions{})[:KeySize])
	if got != "4a696d47726179524950" {
		t.Fatalf("record 0 key = %s, want 4a696d47726179524950", got)
	}
}

func TestFirstKeyBytesFromNotes(t *testing.T) {
	// dsort notes §2: first 6 key bytes of records 1, 2, 3, 4, 7, 8 (binary)
	// and the first 6 chars of ASCII records 0..2.
	bin := map[uint64]string{1: "95e0e48262b3", 2: "45979353dbed", 3: "882a02c31536",
		4: "5c90ab38ae52", 7: "5efc4abfaca2", 8: "44f78c8b40bf"}
	for i, want := range bin {
		if got := hex.EncodeToString(gen(1, i, GenOptions{})[:6]); got != want {
			t.Errorf("record %d key starts %s, want %s", i, got, want)
		}
	}
	for i, want := range []string{"AsfAGH", "~sHd0j", "uI^EYm"} {
		if got := string(gen(1, uint64(i), GenOptions{ASCII: true})[:6]); got != want {
			t.Errorf("ASCII record %d key starts %q, want %q", i, got, want)
		}
	}
}

func TestRecordsZeroToTwo(t *testing.T) {
	rows := readFields(t, "records_0_2.hex")
	if len(rows) != 6 {
		t.Fatalf("records_0_2.hex: %d rows, want 6", len(rows))
	}
	for form, opt := range []GenOptions{{}, {ASCII: true}} {
		got := gen(3, 0, opt)
		for i := range 3 {
			want := hexBytes(t, rows[form*3+i][0])
			if !bytes.Equal(got[i*Size:(i+1)*Size], want) {
				t.Errorf("%v record %d:\n got %x\nwant %x", opt, i, got[i*Size:(i+1)*Size], want)
			}
		}
	}
	// Spot-check the ASCII layout: key, 2 spaces, 32 hex digits of the
	// record number, 2 spaces, 52 filler chars, CR LF.
	r := gen(1, 0xABCDEF, GenOptions{ASCII: true})
	if got := string(r[10:46]); got != "  00000000000000000000000000ABCDEF  " {
		t.Errorf("ASCII record number field = %q", got)
	}
	if r[98] != '\r' || r[99] != '\n' {
		t.Errorf("ASCII record ends %q, want CR LF", r[98:])
	}
}

func TestSkewTablesAreRecordKeys(t *testing.T) {
	rows := readFields(t, "skew_tables.txt")
	if len(rows) != 129 {
		t.Fatalf("skew_tables.txt: %d rows, want 129", len(rows))
	}
	bin := gen(129, 0, GenOptions{})
	asc := gen(129, 0, GenOptions{ASCII: true})
	for k, row := range rows {
		if row[0] != strconv.Itoa(k) {
			t.Fatalf("row %d is numbered %s", k, row[0])
		}
		wantBin, wantASCII := hexBytes(t, row[1]), hexBytes(t, row[2])
		if got := bin[k*Size : k*Size+6]; !bytes.Equal(got, wantBin) {
			t.Errorf("Skew_binary[%d] = %x, record %d key starts %x", k, wantBin, k, got)
		}
		if got := asc[k*Size : k*Size+6]; !bytes.Equal(got, wantASCII) {
			t.Errorf("Skew_ascii[%d] = %q, ASCII record %d key starts %q", k, wantASCII, k, got)
		}
		var tab [8]byte
		tab[0], tab[1] = byte(skewBinary[k]>>40), byte(skewBinary[k]>>32)
		tab[2], tab[3], tab[4], tab[5] = byte(skewBinary[k]>>24), byte(skewBinary[k]>>16), byte(skewBinary[k]>>8), byte(skewBinary[k])
		if !bytes.Equal(tab[:6], wantBin) || !bytes.Equal(skewASCII[k][:], wantASCII) {
			t.Errorf("derived skew table row %d = %x / %q, want %x / %q", k, tab[:6], skewASCII[k][:], wantBin, wantASCII)
		}
	}
}

func TestJumpTable(t *testing.T) {
	// Entries of rand16.c's Gen[] table: f^(2^k) as (a, c).
	for _, tc := range []struct {
		k    int
		a, c u128
	}{
		{0, u128{0x2360ed051fc65da4, 0x4385df649fccf645}, u128{0x4a696d4772617952, 0x4950202020202001}},
		{1, u128{0x17bce35bdf69743c, 0x529ed9eb20e0ae99}, u128{0x95e0e48262b3edfe, 0x04479485c755b646}},
		{2, u128{0xf4dd417327db7a9b, 0xd194dfbe42d45771}, u128{0x882a02c315362b60, 0x765f100068b33a1c}},
		{10, u128{0xae4f079d54fbece1, 0x478331d3c6bef001}, u128{0x991965329dccb28d, 0x581199ab18c5fc00}},
		{64, u128{0x5f0ba18c53cd8fbc, 0x0000000000000001}, u128{0xf0b1944bfd71a97f, 0x0000000000000000}},
		{104, u128{0xcd8fbc0000000000, 0x0000000000000001}, u128{0x71a97f0000000000, 0x0000000000000000}},
		{127, u128{0, 1}, u128{0x8000000000000000, 0}},
	} {
		if got := jumps[tc.k]; got.a != tc.a || got.c != tc.c {
			t.Errorf("jumps[%d] = %x, want a=%x c=%x", tc.k, got, tc.a, tc.c)
		}
	}
	// Skip-ahead agrees with stepping.
	x := u128{}
	for n := uint64(0); n < 3000; n++ {
		if got := randAt(u128{0, n}); got != x {
			t.Fatalf("randAt(%d) = %x, stepping gives %x", n, got, x)
		}
		x = next(x)
	}
}

func TestSkewIndex(t *testing.T) {
	// The table in gensort.c's get_skew_index comment, plus the quirk that any
	// of the top 4 bits of a half jumps straight to 64 / 128.
	for _, tc := range []struct {
		rec  u128
		want int
	}{
		{u128{0, 0}, 0}, {u128{0, 1}, 1}, {u128{0, 2}, 2}, {u128{0, 3}, 2}, {u128{0, 4}, 3},
		{u128{0, 7}, 3}, {u128{0, 8}, 4}, {u128{0, 0xF}, 4}, {u128{0, 0x10}, 5},
		{u128{0, 1<<60 - 1}, 60}, {u128{0, 1 << 60}, 64}, {u128{0, 1 << 63}, 64}, {u128{0, math.MaxUint64}, 64},
		{u128{1, 0}, 65}, {u128{1, 1}, 65}, {u128{2, 0}, 66}, {u128{1<<60 - 1, 0}, 124},
		{u128{1 << 60, 0}, 128}, {u128{1 << 63, 0}, 128}, {u128{math.MaxUint64, math.MaxUint64}, 128},
	} {
		if got := skewIndex(tc.rec); got != tc.want {
			t.Errorf("skewIndex(%x) = %d, want %d", tc.rec, got, tc.want)
		}
	}
}

type vector struct {
	name         string
	opt          GenOptions
	first, count uint64
	sha          string
	sum          string
}

func loadVectors(t *testing.T) []vector {
	var vs []vector
	for _, row := range readFields(t, "gensort_vectors.txt") {
		if len(row) != 6 {
			t.Fatalf("gensort_vectors.txt: bad row %q", row)
		}
		v := vector{name: row[0], sha: row[4], sum: row[5]}
		for _, f := range strings.Split(row[1], ",") {
			switch f {
			case "-a":
				v.opt.ASCII = true
			case "-s":
				v.opt.Skew = true
			case "-":
			default:
				t.Fatalf("gensort_vectors.txt: unknown flag %q", f)
			}
		}
		var err error
		if v.first, err = strconv.ParseUint(row[2], 10, 64); err != nil {
			t.Fatal(err)
		}
		if v.count, err = strconv.ParseUint(row[3], 10, 64); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	if len(vs) < 20 {
		t.Fatalf("only %d gensort vectors", len(vs))
	}
	return vs
}

func TestGensortVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.name, func(t *testing.T) {
			buf := gen(int(v.count), v.first, v.opt)
			if got := sha256.Sum256(buf); hex.EncodeToString(got[:]) != v.sha {
				t.Errorf("Generate: sha256 %x, gensort's %s", got, v.sha)
			}
			var c Checksum
			c.AddAll(buf)
			if c.String() != v.sum {
				t.Errorf("checksum %s, gensort -c printed %s", c, v.sum)
			}

			path := filepath.Join(t.TempDir(), "out")
			for _, workers := range []int{1, 3} {
				sum, err := GenerateFile(t.Context(), path, v.first, v.count, v.opt, workers, nil)
				if err != nil {
					t.Fatal(err)
				}
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != v.sha {
					t.Errorf("GenerateFile(workers=%d): sha256 %x, gensort's %s", workers, got, v.sha)
				}
				if sum.String() != v.sum {
					t.Errorf("GenerateFile(workers=%d): checksum %s, gensort's %s", workers, sum, v.sum)
				}
			}
		})
	}
}

func TestGeneratePiecesMatchWhole(t *testing.T) {
	// Any cut of a range into pieces generated on their own (what the
	// parallel writer does through skip-ahead) gives the same bytes.
	const n = 3000
	for _, opt := range []GenOptions{{}, {ASCII: true}, {Skew: true}, {ASCII: true, Skew: true}} {
		whole := gen(n, 123456, opt)
		for _, cuts := range [][]int{{1}, {255, 256, 257}, {7, 999, 1000, 2999}, {100, 200, 300, 2500}} {
			got := make([]byte, 0, n*Size)
			prev := 0
			for _, c := range append(cuts, n) {
				got = append(got, gen(c-prev, 123456+uint64(prev), opt)...)
				prev = c
			}
			if !bytes.Equal(got, whole) {
				t.Errorf("%v cut at %v differs from one Generate call", opt, cuts)
			}
		}
	}
}

func TestGenerateFileParallelEqualsSerial(t *testing.T) {
	// More records than several blocks so every worker gets blocks, and a
	// count that is not a multiple of the block size.
	count := uint64(3*genBlockRecords + 1234)
	dir := t.TempDir()
	want := gen(int(count), 42, GenOptions{Skew: true})
	var wantSum Checksum
	wantSum.AddAll(want)
	for _, workers := range []int{0, 1, 2, 3, 8} {
		path := filepath.Join(dir, "f")
		var reported int64
		sum, err := GenerateFile(t.Context(), path, 42, count, GenOptions{Skew: true}, workers, func(n int64) { reported += n })
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) || sum != wantSum {
			t.Errorf("workers=%d: file or checksum differs from serial generation", workers)
		}
		if reported != int64(count)*Size {
			t.Errorf("workers=%d: progress reported %d bytes, want %d", workers, reported, count*Size)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
			t.Errorf("mode %v, want 0644", st.Mode().Perm())
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the output", len(ents))
	}
}

func TestGenerateFileCanceledLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big")
	ctx, cancel := context.WithCancel(t.Context())
	// Cancel from the progress callback after the first write.
	_, err := GenerateFile(ctx, path, 0, 50*genBlockRecords, GenOptions{}, 2, func(int64) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("canceled run left %d files, want none", len(ents))
	}
}

func TestGenerateFileErrors(t *testing.T) {
	dir := t.TempDir()
	// The last representable record is fine.
	if _, err := GenerateFile(t.Context(), filepath.Join(dir, "last"), math.MaxUint64, 1, GenOptions{ASCII: true}, 0, nil); err != nil {
		t.Errorf("record 2^64-1: %v", err)
	}
	for _, tc := range []struct {
		name, path   string
		first, count uint64
		want         string
	}{
		// The directory is named, not the hidden temp file in it.
		{"missing dir", filepath.Join(dir, "no", "such", "f"), 0, 10,
			"cannot write " + filepath.Join(dir, "no", "such", "f") + ": directory " + filepath.Join(dir, "no", "such") + " does not exist"},
		{"file as dir", filepath.Join(dir, "last", "f"), 0, 10, "cannot write " + filepath.Join(dir, "last", "f") + ": " +
			filepath.Join(dir, "last") + " is not a directory"},
		{"directory", dir, 0, 10, "is a directory"},
		{"past 2^64", filepath.Join(dir, "f"), math.MaxUint64, 2, "past 2^64"},
	} {
		_, err := GenerateFile(t.Context(), tc.path, tc.first, tc.count, GenOptions{}, 0, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), ".gantry-tmp") {
			t.Errorf("%s: err = %v, want it to mention %q (and no temp file)", tc.name, err, tc.want)
		}
	}
}

func TestGenerateFileDevNull(t *testing.T) {
	sum, err := GenerateFile(t.Context(), os.DevNull, 0, 1000, GenOptions{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.String() != "1ea6370b955" {
		t.Errorf("checksum %s, want gensort's 1ea6370b955", sum)
	}
}

func TestSplitCountAndPartPaths(t *testing.T) {
	firsts, counts := SplitCount(100, 10, 4)
	if want := []uint64{100, 103, 106, 108}; !equalU64(firsts, want) {
		t.Errorf("firsts %v, want %v", firsts, want)
	}
	if want := []uint64{3, 3, 2, 2}; !equalU64(counts, want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
	if got := PartPaths("d/f", 3); strings.Join(got, " ") != "d/f.0000 d/f.0001 d/f.0002" {
		t.Errorf("PartPaths = %v", got)
	}
	if got := PartPaths("f", 12000); got[11999] != "f.11999" || got[0] != "f.00000" {
		t.Errorf("PartPaths(12000) = %s … %s", got[0], got[11999])
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestChecksum(t *testing.T) {
	for _, tc := range []struct {
		c    Checksum
		want string
	}{
		{Checksum{}, "0"},
		{Checksum{0, 0xabc}, "abc"},
		{Checksum{1, 0}, "10000000000000000"},
		{Checksum{0x12, 0xff}, "1200000000000000ff"},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.c, got, tc.want)
		}
		back, err := ParseChecksum(tc.want)
		if err != nil || back != tc.c {
			t.Errorf("ParseChecksum(%q) = %#v, %v", tc.want, back, err)
		}
	}
	if got := (Checksum{0, math.MaxUint64}).Plus(Checksum{0, 2}); got != (Checksum{1, 1}) {
		t.Errorf("Plus does not carry: %#v", got)
	}
	for _, bad := range []string{"", "xyz", "123456789012345678901234567890123", "-1"} {
		if _, err := ParseChecksum(bad); err == nil {
			t.Errorf("ParseChecksum(%q) accepted", bad)
		}
	}
	// Add and AddAll agree.
	buf := gen(500, 0, GenOptions{})
	var a, b Checksum
	for off := 0; off < len(buf); off += Size {
		a.Add(buf[off:])
	}
	b.AddAll(buf)
	if a != b {
		t.Errorf("Add %v != AddAll %v", a, b)
	}
}
