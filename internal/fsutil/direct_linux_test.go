package fsutil

import (
	"bytes"
	"errors"
	"io"
	"maps"
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
// still exactly what was written, its padded tail included, the later
// writers map no new buffer, and no more than directKeep stay kept.
func TestWriteAtomicDirectReusesBuffers(t *testing.T) {
	dir := t.TempDir()
	probe, err := os.Create(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	dw, err := newDirectWriter(probe)
	probe.Close()
	if err != nil {
		t.Skipf("the test's file system refuses O_DIRECT (%v): no direct writer to reuse buffers", err)
	}
	if err := dw.finish(false); err != nil {
		t.Fatal(err)
	}
	pooled := func() map[*byte]bool {
		directBlocks.mu.Lock()
		defer directBlocks.mu.Unlock()
		m := map[*byte]bool{}
		for _, b := range directBlocks.free {
			m[&b[:1][0]] = true
		}
		return m
	}
	first := pooled()
	if len(first) < directBufs || len(first) > directKeep {
		t.Fatalf("%d buffers kept after a writer, want %d..%d", len(first), directBufs, directKeep)
	}
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
		if now := pooled(); !maps.Equal(now, first) {
			t.Fatalf("after file %d the pool holds %d buffers, %d of them new; want the same %d reused",
				i, len(now), len(now)-countIn(now, first), len(first))
		}
	}
}

func countIn(m, in map[*byte]bool) int {
	n := 0
	for k := range m {
		if in[k] {
			n++
		}
	}
	return n
}

// A finished direct writer refuses further writes: its buffers went back
// to the pool, for other writers.
func TestDirectWriterRefusesWritesAfterFinish(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dw, err := newDirectWriter(f)
	if err != nil {
		t.Skipf("the test's file system refuses O_DIRECT (%v)", err)
	}
	if _, err := dw.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := dw.finish(true); err != nil {
		t.Fatal(err)
	}
	if n, err := dw.Write([]byte("late")); err == nil || n != 0 {
		t.Errorf("write after finish: %d, %v; want 0 and an error", n, err)
	}
	if b := dw.Block(); b != nil {
		t.Errorf("Block after finish lent %d bytes", len(b))
	}
	if err := dw.Commit(0); err == nil {
		t.Error("Commit after finish reported no error")
	}
}
