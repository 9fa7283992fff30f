package fsutil

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// offsetsWriter records where each write it is given starts.
type offsetsWriter struct {
	bytes.Buffer
	starts []int
}

func (o *offsetsWriter) Write(p []byte) (int, error) {
	o.starts = append(o.starts, o.Len())
	return o.Buffer.Write(p)
}

// An AlignedWriter passes on exactly what it was given, however it is cut
// into writes, and every write it makes starts at a multiple of
// AlignedBlock; all but the last are whole blocks.
func TestAlignedWriterWritesWholeBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{0, 1, AlignedBlock - 1, AlignedBlock, 2*AlignedBlock + 12345} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		var out offsetsWriter
		aw := NewAlignedWriter(&out)
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(3<<20)) // writes smaller and larger than a block
			if k, err := aw.Write(rest[:n]); k != n || err != nil {
				t.Fatalf("Write: %d, %v", k, err)
			}
			rest = rest[n:]
		}
		if err := aw.Flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("size %d: the output differs from the input", size)
		}
		for i, s := range out.starts {
			if s%AlignedBlock != 0 {
				t.Errorf("size %d: write %d starts at %d, not a multiple of %d", size, i, s, AlignedBlock)
			}
		}
		if want := (size + AlignedBlock - 1) / AlignedBlock; len(out.starts) != want {
			t.Errorf("size %d: %d writes, want %d", size, len(out.starts), want)
		}
	}
}
