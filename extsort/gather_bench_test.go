package extsort

import (
	"testing"
)

// BenchmarkSortedGather reads a 200 MB input sorted in memory back in
// sorted order, 1 MiB at a time, as a served piece does.
func BenchmarkSortedGather(b *testing.B) {
	for _, read := range []bool{false, true} {
		b.Run(map[bool]string{false: "mapped", true: "read"}[read], func(b *testing.B) {
			defer func(old bool) { readNotMap = old }(readNotMap)
			readNotMap = read
			const n = 2000000
			inputs, _ := benchInputs(b, n)
			s, err := SortInMemory(b.Context(), Config{Memory: 512 << 20, Workers: 2}, inputs, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Free()
			p := make([]byte, 10485*recSize)
			b.SetBytes(n * recSize)
			b.ResetTimer()
			for range b.N {
				for off := int64(0); off < n*recSize; off += int64(len(p)) {
					if _, err := s.ReadAt(p, off); err != nil && off+int64(len(p)) < n*recSize {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkSortInMemory sorts a 200 MB input in memory (mapped), as a
// dsort worker whose input fits its budget does.
func BenchmarkSortInMemory(b *testing.B) {
	const n = 2000000
	inputs, _ := benchInputs(b, n)
	b.SetBytes(n * recSize)
	for b.Loop() {
		s, err := SortInMemory(b.Context(), Config{Memory: 512 << 20, Workers: 2}, inputs, nil)
		if err != nil {
			b.Fatal(err)
		}
		s.Free()
	}
}

// BenchmarkSortMappedEntries is the sort of a dsort worker's 500 MB alone:
// input mapped and entry array allocated (and touched) once.
func BenchmarkSortMappedEntries(b *testing.B) {
	const n = 5000000
	inputs, total := benchInputs(b, n)
	in, err := mapInputs(b.Context(), inputs, 2)
	if err != nil || in == nil {
		b.Skip("inputs not mapped", err)
	}
	defer in.free()
	es, free := bigEntries(int(total / recSize))
	defer free()
	b.SetBytes(total)
	for b.Loop() {
		if err := in.sortEntries(inputs, es, 2); err != nil {
			b.Fatal(err)
		}
	}
}

// benchInputs writes n uniformly distributed records to one file in a
// temp dir and returns it scanned, with its size.
func benchInputs(b *testing.B, n int) ([]Input, int64) {
	dir := b.TempDir()
	writeInputs(b, dir, makeRecords(1, n, dists["uniform"]), []int{n})
	inputs, total, err := ScanInputs([]string{dir})
	if err != nil {
		b.Fatal(err)
	}
	return inputs, total
}
