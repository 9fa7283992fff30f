package fsutil

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// WriteAtomicDirect produces exactly what write wrote, whatever the length and however it
// is cut into Write calls, on the test's file system and on tmpfs (which may refuse
// O_DIRECT: then the page cache is used).
func TestWriteAtomicDirectContent(t *testing.T) {
	dirs := []string{t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		shm, err := os.MkdirTemp("/dev/shm", "gantry-fsutil-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(shm) })
			dirs = append(dirs, shm)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3*directBlock+directAlign+17)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, dir := range dirs {
		for _, n := range []int{0, 1, directAlign - 1, directAlign, directBlock - 1, directBlock, directBlock + 1, len(data)} {
			path := filepath.Join(dir, "out")
			os.WriteFile(path, []byte("previous"), 0o644)
			err := WriteAtomicDirect(path, 0o640, func(w io.Writer) error {
				for p := data[:n]; len(p) > 0; {
					k := min(len(p), 1+rng.IntN(3*directAlign))
					if rng.IntN(8) == 0 {
						k = min(len(p), directBlock+rng.IntN(directBlock))
					}
					if _, err := w.Write(p[:k]); err != nil {
						return err
					}
					p = p[k:]
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s, %d bytes: %v", dir, n, err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data[:n]) {
				t.Fatalf("%s, %d bytes: read back %d bytes that differ", dir, n, len(got))
			}
			if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
				t.Errorf("mode %v, want 0640", st.Mode().Perm())
			}
			assertOnly(t, dir, "out")
		}
	}
}

// A failing write leaves the previous file and no temp file.
func TestWriteAtomicDirectFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	if err := os.WriteFile(path, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteAtomicDirect(path, 0o644, func(w io.Writer) error {
		w.Write(make([]byte, 2*directBlock+5))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "previous" {
		t.Fatalf("previous file became %q", got)
	}
	assertOnly(t, dir, "out")
}

// Direct writers one after another reuse the buffers of those before
// (directBlocks), which still hold the earlier files' bytes: each file is
// still exactly what was written, its padded tail included, and no more
// than directKeep buffers stay kept.
func TestWriteAtomicDirectReusesBuffers(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	for i, size := range []int{2*directBlock + 100, 17, directBlock, directBlock + directAlign - 1, 0} {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rng.Uint32()) | 1 // never zero: a stale or missing byte shows
		}
		path := filepath.Join(dir, "f")
		if err := WriteAtomicDirect(path, 0o644, func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("file %d (%d bytes): content differs (%d bytes read)", i, size, len(got))
		}
	}
	directBlocks.mu.Lock()
	kept := len(directBlocks.free)
	directBlocks.mu.Unlock()
	if kept == 0 || kept > directKeep {
		t.Errorf("%d buffers kept, want 1..%d", kept, directKeep)
	}
}
