package fsutil

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFileAtomic(path, []byte("one"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	st, _ := os.Stat(path)
	if string(got) != "two" || st.Mode().Perm() != 0o600 {
		t.Fatalf("content %q perm %v", got, st.Mode().Perm())
	}
	assertOnly(t, dir, "f")
}

func TestWriteAtomicFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	os.WriteFile(path, []byte("old"), 0o644)
	boom := errors.New("boom")
	err := WriteAtomic(path, 0o644, func(w io.Writer) error {
		w.Write([]byte("half of the new"))
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want boom naming the path", err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "old" {
		t.Fatalf("old content replaced by %q", got)
	}
	assertOnly(t, dir, "f")
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "f"), nil, 0o644); err == nil {
		t.Fatal("write into a missing dir succeeded")
	}
}

// A file that cannot be created is reported by its directory, never by
// the hidden temp name the caller never gave, for WriteAtomic and
// WriteAtomicDirect alike; a missing directory is still fs.ErrNotExist.
func TestWriteAtomicNamesTheDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := WriteFileAtomic(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	noop := func(io.Writer) error { return nil }
	for _, write := range []func(string, os.FileMode, func(io.Writer) error) error{WriteAtomic, WriteAtomicDirect} {
		for _, tc := range []struct {
			path, want string
			notExist   bool
		}{
			{filepath.Join(dir, "no", "such", "f"), "cannot write " + filepath.Join(dir, "no", "such", "f") + ": directory " + filepath.Join(dir, "no", "such") + " does not exist", true},
			{filepath.Join(file, "f"), "cannot write " + filepath.Join(file, "f") + ": " + file + " is not a directory", false},
		} {
			err := write(tc.path, 0o644, noop)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), TempPrefix) || errors.Is(err, fs.ErrNotExist) != tc.notExist {
				t.Errorf("write %s: %v; want %q, no temp name, ErrNotExist %v", tc.path, err, tc.want, tc.notExist)
			}
		}
	}
}

func TestRenameSync(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "sub", "b")
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(a, []byte("x"), 0o644)
	if err := RenameSync(a, b); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b); err != nil {
		t.Fatal(err)
	}
}

func TestOwnedDirExclusiveAndClose(t *testing.T) {
	parent := t.TempDir()
	d, err := CreateOwnedDir(parent, "job-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockDir(d.Path); !errors.Is(err, ErrBusy) {
		t.Fatalf("second LockDir on a live dir = %v, want ErrBusy", err)
	}
	if removed, err := SweepStale(parent, "job-"); err != nil || len(removed) != 0 {
		t.Fatalf("sweep removed a live dir: %v %v", removed, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Path); !os.IsNotExist(err) {
		t.Fatalf("Close left the dir: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestReleaseKeepsContentsForTakeover(t *testing.T) {
	parent := t.TempDir()
	d, _ := CreateOwnedDir(parent, "job-")
	os.WriteFile(filepath.Join(d.Path, "state"), []byte("s"), 0o644)
	d.Release()
	again, err := LockDir(d.Path)
	if err != nil {
		t.Fatalf("takeover of a released dir: %v", err)
	}
	defer again.Close()
	if b, _ := os.ReadFile(filepath.Join(again.Path, "state")); string(b) != "s" {
		t.Fatal("takeover lost the predecessor's files")
	}
}

// TestSweepStaleRemovesDeadOwners kills the owning process for real: the kernel drops its
// flock, and only then may the sweep remove the directory.
func TestSweepStaleRemovesDeadOwners(t *testing.T) {
	parent := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FSUTIL_HELPER_PARENT="+parent)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	dead := strings.TrimSpace(string(out))
	if !strings.HasPrefix(dead, filepath.Join(parent, "job-")) {
		t.Fatalf("helper printed %q", out)
	}
	live, _ := CreateOwnedDir(parent, "job-")
	defer live.Close()
	other := filepath.Join(parent, "keep-me")
	os.Mkdir(other, 0o755)
	young := filepath.Join(parent, "job-young-unlocked")
	os.Mkdir(young, 0o755)
	old := filepath.Join(parent, "job-old-unlocked")
	os.Mkdir(old, 0o755)
	past := time.Now().Add(-2 * StaleGrace)
	os.Chtimes(old, past, past)
	file := filepath.Join(parent, "job-file")
	os.WriteFile(file, nil, 0o644)

	removed, err := SweepStale(parent, "job-")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{dead: true, old: true}
	if len(removed) != len(want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for _, r := range removed {
		if !want[r] {
			t.Fatalf("removed %s, want only %v", r, want)
		}
	}
	for _, p := range []string{live.Path, other, young, file} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("sweep removed %s", p)
		}
	}
	if r, err := SweepStale(filepath.Join(parent, "nope"), "job-"); err != nil || r != nil {
		t.Fatalf("missing parent: %v %v", r, err)
	}
}

// TestSweepStaleIdleKeepsRecentlyDeadOwners: a dead owner's directory that
// changed within the idle time stays (its process may be restarted and
// take it over, files and all); once idle longer, it is swept.
func TestSweepStaleIdleKeepsRecentlyDeadOwners(t *testing.T) {
	parent := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FSUTIL_HELPER_PARENT="+parent)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	dead := strings.TrimSpace(string(out))
	if removed, err := SweepStaleIdle(parent, "job-", time.Hour); err != nil || len(removed) != 0 {
		t.Fatalf("a dead owner's directory changed just now: removed %v (%v), want nothing", removed, err)
	}
	again, err := LockDir(dead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(again.Path, "spill")); err != nil {
		t.Fatalf("the taken-over directory lost its files: %v", err)
	}
	again.Release()
	past := time.Now().Add(-2 * time.Hour)
	os.Chtimes(dead, past, past)
	if removed, err := SweepStaleIdle(parent, "job-", time.Hour); err != nil || len(removed) != 1 || removed[0] != dead {
		t.Fatalf("a dead owner's directory idle for 2 h: removed %v (%v), want %s", removed, err, dead)
	}
}

// TestMain doubles as the child process of TestSweepStaleRemovesDeadOwners: with
// FSUTIL_HELPER_PARENT set it creates an owned dir, prints it and exits without releasing it.
func TestMain(m *testing.M) {
	parent := os.Getenv("FSUTIL_HELPER_PARENT")
	if parent == "" {
		os.Exit(m.Run())
	}
	d, err := CreateOwnedDir(parent, "job-")
	if err != nil {
		os.Exit(2)
	}
	os.WriteFile(filepath.Join(d.Path, "spill"), make([]byte, 1024), 0o644)
	os.Stdout.WriteString(d.Path + "\n")
	os.Exit(0)
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
}

// TestLockDirBesideASweep: processes sharing a temp dir each lock their
// own subdirectory while another sweeps stale ones; a sweep that takes a
// directory being created (or an old ownerless one being taken over) for a
// dead owner's must not leave its taker holding a lock on a removed file
// (or failing to open it): every LockDir ends owning a directory that is
// there.
func TestLockDirBesideASweep(t *testing.T) {
	parent := t.TempDir()
	stop := make(chan struct{})
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		for {
			select {
			case <-stop:
				return
			default:
				SweepStale(parent, "w-")
			}
		}
	}()
	defer func() { close(stop); <-swept }()
	past := time.Now().Add(-2 * StaleGrace)
	for i := range 300 {
		path := filepath.Join(parent, fmt.Sprint("w-", i))
		if i%2 == 1 {
			// An old ownerless directory (left by a crash before its
			// lock file existed), taken over while a sweep removes it.
			os.Mkdir(path, 0o755)
			os.Chtimes(path, past, past)
		}
		d, err := LockDir(path)
		if err != nil {
			t.Fatalf("LockDir %d beside a sweep: %v", i, err)
		}
		if err := os.WriteFile(filepath.Join(path, "run"), []byte("x"), 0o644); err != nil {
			t.Fatalf("LockDir %d: the owned directory is gone: %v", i, err)
		}
		if _, err := os.Stat(filepath.Join(path, OwnerFile)); err != nil {
			t.Fatalf("LockDir %d: its lock file is gone: %v", i, err)
		}
		d.Close()
	}
}

// A sweep removing a dead owner's directory holds its lock for as long as
// the removal takes (long, for a big directory on a loaded machine). A
// LockDir taking the directory over meanwhile owns a fresh directory at
// once, and the removal, still running, takes nothing of it: neither its
// lock file nor what it writes there.
func TestLockDirBesideASlowSweep(t *testing.T) {
	parent := t.TempDir()
	path := filepath.Join(parent, "w-dead")
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	// A dead owner: its name in the lock file, the lock itself free.
	if err := os.WriteFile(filepath.Join(path, OwnerFile), []byte("pid 2147483646 started long ago\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "old"), []byte("the dead owner's"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, taken := make(chan struct{}), make(chan struct{})
	sweepHeld = func(string) {
		close(held)
		select { // the removal goes on while the new owner works
		case <-taken:
		case <-time.After(5 * time.Second): // poll: a LockDir that waits for the sweep fails the test, not hangs it
		}
	}
	defer func() { sweepHeld = nil }()
	swept := make(chan []string)
	go func() {
		removed, _ := SweepStale(parent, "w-")
		swept <- removed
	}()
	<-held
	start := time.Now()
	d, err := LockDir(path)
	if err != nil {
		close(taken)
		t.Fatalf("LockDir while a sweep removes the dead owner's directory: %v", err)
	}
	defer d.Close()
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("LockDir waited %s for the sweep", waited)
	}
	if err := os.WriteFile(filepath.Join(path, "new"), []byte("the new owner's"), 0o644); err != nil {
		t.Fatal(err)
	}
	close(taken)
	if removed := <-swept; len(removed) != 1 || removed[0] != path {
		t.Errorf("sweep removed %v, want the dead owner's directory", removed)
	}
	for _, name := range []string{OwnerFile, "new"} {
		if _, err := os.Stat(filepath.Join(path, name)); err != nil {
			t.Errorf("the new owner's %s is gone: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(path, "old")); err == nil {
		t.Error("the dead owner's file is in the new owner's directory")
	}
	if left, _ := filepath.Glob(filepath.Join(parent, "*")); len(left) != 1 {
		t.Errorf("the parent holds %v, want only the new owner's directory", left)
	}
	// The lock is the new owner's: a sweep leaves the directory alone.
	if removed, err := SweepStale(parent, "w-"); err != nil || len(removed) != 0 {
		t.Errorf("a sweep beside the new owner removed %v (%v)", removed, err)
	}
}

// LockInPlace holds a directory against a second lock, from this process
// or a child, writes nothing into it, and lets go on Close.
func TestLockInPlace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	f, err := LockInPlace(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockInPlace(dir); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second lock: %v, want ErrBusy", err)
	}
	// Another process (flock(1) exits 7 on a conflict with -n -E 7).
	out, err := exec.Command("flock", "-n", "-E", "7", dir, "true").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Fatalf("flock(1) on the locked dir: %v %s, want its conflict exit code 7", err, out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("the lock wrote %d entries into the dir", len(ents))
	}
	f.Close()
	g, err := LockInPlace(dir)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	g.Close()
}
