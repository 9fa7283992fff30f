// Package fsutil holds gantry's file-system disciplines, written once:
//
//   - atomic writes: WriteFileAtomic / WriteAtomic write to a temp name beside the target,
//     fsync, rename over the target and fsync the directory, so a reader sees the old file or
//     the new one, never a torn one, and a crash leaves at worst a stray temp file;
//   - RenameSync / SyncDir: a rename that survives a power cut;
//   - owned directories: CreateOwnedDir / LockDir give a process exclusive use of a directory
//     through an flock'd owner file that the kernel releases when the process dies, and
//     SweepStale removes the directories of owners that are gone. Nothing is removed while its
//     owner lives, and nothing outside the given prefix is ever touched.
//
// The files: atomic.go (this one) the atomic writes, WriteAtomicDirect and
// RenameSync / SyncDir; direct_linux.go and direct_other.go the O_DIRECT
// writer behind WriteAtomicDirect (a plain one elsewhere); writeback_linux.go
// and writeback_other.go starting the kernel's writeback of what was
// written; aligned.go AlignedWriter (writes in AlignedBlock units);
// owned.go the owned directories (CreateOwnedDir, LockDir, SweepStale) on
// the flock of lock_unix.go (lock_other.go where there is none).
package fsutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// TempPrefix starts the name of every temp file WriteAtomic creates beside its target.
const TempPrefix = ".gantry-tmp-"

// WriteFileAtomic writes data to path atomically (see WriteAtomic).
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return WriteAtomic(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteAtomic creates path with perm from what write produces: it writes a temp file in the
// same directory (buffered), fsyncs it, renames it over path and fsyncs the directory. If
// write or any step fails, path is left as it was and the temp file is removed.
func WriteAtomic(path string, perm os.FileMode, write func(w io.Writer) error) error {
	return writeAtomic(path, perm, func(f *os.File) error { return writeBuffered(f, write) })
}

// writeBuffered writes what write produces to f through a buffer, starting the disk
// writing every writebackStep bytes.
func writeBuffered(f *os.File, write func(w io.Writer) error) error {
	bw := bufio.NewWriterSize(&writebackWriter{f: f}, 256<<10)
	if err := write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// WriteAtomicDirect is WriteAtomic for a large file written once and not read back soon (a
// sort's output). Where the file system allows it (Linux, O_DIRECT), the data bypasses the
// page cache: what write produces is gathered into aligned buffers that a background
// goroutine writes straight to disk while write fills the next one, so the caller pays
// neither the copy into the cache nor the cache's allocation, and the final fsync has only
// metadata left to do. Elsewhere it is WriteAtomic. The result is the same file, with the
// same guarantees.
func WriteAtomicDirect(path string, perm os.FileMode, write func(w io.Writer) error) error {
	return writeAtomic(path, perm, func(f *os.File) error {
		dw, err := newDirectWriter(f)
		if err != nil {
			return writeBuffered(f, write)
		}
		err = write(dw)
		return errors.Join(err, dw.finish(err == nil))
	})
}

// createError is writeAtomic's error when no temp file could be made beside
// path: it names path's directory, not the hidden temp name the user never
// gave, and still wraps err (errors.Is(err, fs.ErrNotExist) holds for a
// missing directory).
func createError(path string, err error) error {
	dir := filepath.Dir(path)
	msg := fmt.Sprintf("fsutil: cannot write %s: cannot create a file in %s", path, dir)
	st, serr := os.Stat(dir)
	switch {
	case errors.Is(serr, fs.ErrNotExist):
		msg = fmt.Sprintf("fsutil: cannot write %s: directory %s does not exist", path, dir)
	case serr == nil && !st.IsDir():
		msg = fmt.Sprintf("fsutil: cannot write %s: %s is not a directory", path, dir)
	default:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg += ": " + pe.Err.Error()
		}
	}
	return &createErr{msg: msg, err: err}
}

// createErr is createError's error: its own text, the cause underneath.
type createErr struct {
	msg string
	err error
}

func (e *createErr) Error() string { return e.msg }
func (e *createErr) Unwrap() error { return e.err }

// writeAtomic is the discipline both share: produce writes the content to a temp file
// beside path, which is then fsynced, renamed over path, and its directory fsynced.
func writeAtomic(path string, perm os.FileMode, produce func(f *os.File) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, TempPrefix+base+".*")
	if err != nil {
		return createError(path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("fsutil: write %s: %w", path, err)
		}
	}()
	if err = produce(f); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// RenameSync renames oldpath to newpath and fsyncs the directories involved, so the rename
// survives a crash.
func RenameSync(oldpath, newpath string) error {
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	od, nd := filepath.Dir(oldpath), filepath.Dir(newpath)
	if err := SyncDir(nd); err != nil {
		return err
	}
	if od != nd {
		return SyncDir(od)
	}
	return nil
}

// SyncDir fsyncs a directory so that entries created, renamed or removed in it are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsutil: sync dir %s: %w", dir, err)
	}
	return nil
}

// writebackStep is how many bytes a WriteAtomic writes between two writeback kicks.
const writebackStep = 16 << 20

// writebackWriter writes to f and, every writebackStep bytes, starts the disk writing them
// (startWriteback): a large file then goes to disk while the rest of it is being produced,
// and the final fsync waits only for the tail instead of the whole file. Small files never
// reach a step and are left to the fsync alone.
type writebackWriter struct {
	f       *os.File
	off     int64 // bytes written
	flushed int64 // bytes whose writeback was started
}

func (w *writebackWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.flushed >= writebackStep {
		startWriteback(w.f, w.flushed, w.off-w.flushed)
		w.flushed = w.off
	}
	return n, err
}

// StartWriteback asks the kernel to start writing f's bytes [off, off+n)
// to disk now, without waiting (a hint where sync_file_range exists): data
// written in bulk then does not sit dirty until the kernel throttles every
// writer of the machine to the disk's pace.
func StartWriteback(f *os.File, off, n int64) { startWriteback(f, off, n) }
