package record

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// BenchmarkGenerate measures the generator alone on one goroutine, per form.
// (C gensort 1.5 runs at ≈370 MB/s to a file on our 2-vCPU machines; see
// docs/BENCHMARKS.md for the whole-file comparison.)
func BenchmarkGenerate(b *testing.B) {
	buf := make([]byte, genBlockRecords*Size)
	for _, opt := range []GenOptions{{}, {ASCII: true}, {Skew: true}, {ASCII: true, Skew: true}} {
		name := opt.String()
		if name == "" {
			name = "binary"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			var first uint64
			for b.Loop() {
				Generate(buf, first, opt)
				first += genBlockRecords
			}
		})
	}
	b.Run("binary+checksum", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		var c Checksum
		for b.Loop() {
			Generate(buf, 0, GenOptions{})
			c.AddAll(buf)
		}
	})
}

// BenchmarkGenerateFile measures the parallel writer (generation, checksum,
// ordered writes) into /dev/null and into a file, with 1 worker and with one
// per core.
func BenchmarkGenerateFile(b *testing.B) {
	const count = 1_000_000 // 100 MB
	dir := b.TempDir()
	for _, target := range []string{os.DevNull, filepath.Join(dir, "out")} {
		for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
			name := fmt.Sprintf("%s/workers=%d", filepath.Base(target), workers)
			b.Run(name, func(b *testing.B) {
				b.SetBytes(count * Size)
				for b.Loop() {
					if _, err := GenerateFile(b.Context(), target, 0, count, GenOptions{}, workers, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkValidate compares Validate with one worker and with one per core
// against the baseline: a straight port of valsort's loop (one 100-byte read
// through a buffered reader, bytes.Compare and crc32 per record).
func BenchmarkValidate(b *testing.B) {
	const count = 1_000_000 // 100 MB, page cache warm after the first run
	data := make([]byte, count*Size)
	Generate(data, 0, GenOptions{})
	path := filepath.Join(b.TempDir(), "in")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("baseline=valsort-loop", func(b *testing.B) {
		b.SetBytes(count * Size)
		for b.Loop() {
			if _, err := valsortLoop(path); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.SetBytes(count * Size)
			for b.Loop() {
				if _, err := Validate(b.Context(), []string{path}, ValidateOptions{Workers: workers}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// valsortLoop is valsort.c's summarize_records in Go: the baseline.
func valsortLoop(path string) (Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return Summary{}, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	s := Summary{FirstUnordered: -1}
	var rec, prev [Size]byte
	for {
		if _, err := io.ReadFull(r, rec[:]); err == io.EOF {
			break
		} else if err != nil {
			return Summary{}, err
		}
		s.Checksum.addUint64(uint64(crc32.ChecksumIEEE(rec[:])))
		if s.Records > 0 {
			switch bytes.Compare(prev[:KeySize], rec[:KeySize]) {
			case 0:
				s.Duplicates++
			case 1:
				if s.Unordered == 0 {
					s.FirstUnordered = int64(s.Records)
				}
				s.Unordered++
			}
		}
		prev = rec
		s.Records++
	}
	return s, nil
}
