package fsutil

import (
	"bytes"
	"errors"
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

// failingWriter takes ok bytes, then fails every write.
type failingWriter struct{ ok int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.ok {
		return 0, errors.New("disk full")
	}
	f.ok -= len(p)
	return len(p), nil
}

// After a failed block write, an AlignedWriter fails every later Write and
// Flush: the next block would otherwise land where the lost one belonged.
func TestAlignedWriterErrorIsSticky(t *testing.T) {
	fw := &failingWriter{ok: AlignedBlock}
	aw := NewAlignedWriter(fw)
	if _, err := aw.Write(make([]byte, 2*AlignedBlock)); err == nil {
		t.Fatal("the second block's write failed, but Write reported no error")
	}
	fw.ok = 1 << 30 // the writer would take more now
	if n, err := aw.Write([]byte("more")); err == nil || n != 0 {
		t.Errorf("Write after a failure: %d, %v; want 0 and the error", n, err)
	}
	if err := aw.Flush(); err == nil {
		t.Error("Flush after a failure reported no error")
	}
}
