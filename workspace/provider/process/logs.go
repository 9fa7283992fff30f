package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/internal/fsutil"

	"github.com/gantryhq/gantry/workspace/provider"
)

var _ provider.LogReader = (*Container)(nil)

// DefaultLogCap is the size at which a workspace's log is rotated:
// <id>.log becomes <id>.log.1 (replacing the older one). A start renames
// it; while the command runs, capLog copies and truncates it.
const DefaultLogCap = 8 << 20

// logMu serialises capLog (the reaper's ticker and Observe both call it).
var logMu sync.Mutex

func (c *Container) logPath(id string) (string, error) {
	if _, err := c.pidfile(id); err != nil {
		return "", err
	}
	return filepath.Join(c.RunDir, id+".log"), nil
}

func (c *Container) logCap() int64 {
	if c.LogCap <= 0 {
		return DefaultLogCap
	}
	return c.LogCap
}

// rotate moves a log over the cap aside before a start appends to it.
func (c *Container) rotate(path string) {
	if fi, err := os.Stat(path); err == nil && fi.Size() >= c.logCap() {
		os.Rename(path, path+".1")
	}
}

// capLog rotates a running command's log once it reaches the cap: the log
// is copied to <id>.log.1 and truncated in place, since the command keeps
// its file open (it appends, O_APPEND, so its next write lands at the new
// end). What the command writes between the copy and the truncation is
// lost: a few writes at most. A log stays under the cap plus what the
// command writes in one check interval (LogCheck).
func (c *Container) capLog(id string) {
	path, err := c.logPath(id)
	if err != nil {
		return
	}
	logMu.Lock()
	defer logMu.Unlock()
	fi, err := os.Stat(path)
	if err != nil || fi.Size() < c.logCap() {
		return
	}
	src, err := os.Open(path)
	if err != nil {
		return
	}
	defer src.Close()
	if err := fsutil.WriteAtomic(path+".1", 0o600, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	}); err != nil {
		return
	}
	os.Truncate(path, 0)
}

// Logs writes the tail of id's output and, with follow, what comes next,
// polling the file (and reopening it when a restart rotated it).
func (c *Container) Logs(ctx context.Context, id string, tail int, follow bool, w io.Writer) error {
	path, err := c.logPath(id)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && follow {
		f, err = waitFor(ctx, path)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: no output of workspace %s yet", provider.ErrNotFound, id)
		}
		return err
	}
	defer func() { f.Close() }()
	if err := writeTail(f, tail, w); err != nil || !follow {
		return err
	}
	return followFile(ctx, &f, path, w)
}

// followFile copies what is appended to *f (and, after a restart rotated
// the log, to the new file at path) to w until ctx ends or the log is
// removed with its workspace.
func followFile(ctx context.Context, f **os.File, path string, w io.Writer) error {
	flush := func() {
		if fl, ok := w.(interface{ Flush() }); ok {
			fl.Flush()
		}
	}
	flush()
	buf := make([]byte, 32<<10)
	for {
		n, err := (*f).Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			flush()
			continue
		}
		if err != nil && err != io.EOF {
			return err
		}
		truncated(*f)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
		if rotated(*f, path) {
			if nf, err := os.Open(path); err == nil {
				(*f).Close()
				*f = nf
			}
		} else if unlinked(*f) {
			return nil // the workspace was deleted (Discard): its log ends here
		}
	}
}

// unlinked reports whether f's file has no name left: removed, not rotated
// (a rotation renames it to .1, which Discard removes with the rest).
func unlinked(f *os.File) bool {
	st, err := f.Stat()
	if err != nil {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && sys.Nlink == 0
}

// truncated moves f back to its start if the file was truncated (capLog)
// below where f reads.
func truncated(f *os.File) {
	pos, err := f.Seek(0, io.SeekCurrent)
	if fi, serr := f.Stat(); err == nil && serr == nil && fi.Size() < pos {
		f.Seek(0, io.SeekStart)
	}
}

// rotated reports whether path is no longer the file f reads.
func rotated(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && !os.SameFile(a, b)
}

func waitFor(ctx context.Context, path string) (*os.File, error) {
	for {
		f, err := os.Open(path)
		if !errors.Is(err, os.ErrNotExist) {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeTail writes the last n lines of f (all if n <= 0) and leaves f at
// its end.
func writeTail(f *os.File, n int, w io.Writer) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	start := int64(0)
	if n > 0 {
		start = tailOffset(f, fi.Size(), n)
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return err
	}
	_, err = io.Copy(w, bufio.NewReader(io.LimitReader(f, fi.Size()-start)))
	return err
}

// tailOffset finds where the last n lines of the first size bytes of f
// begin, reading backwards in blocks.
func tailOffset(f *os.File, size int64, n int) int64 {
	const block = 64 << 10
	lines := 0
	pos := size
	buf := make([]byte, block)
	for pos > 0 {
		k := min(int64(block), pos)
		pos -= k
		if _, err := f.ReadAt(buf[:k], pos); err != nil {
			return 0
		}
		chunk := buf[:k]
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' || pos+int64(i) == size-1 {
				continue
			}
			if lines++; lines == n {
				return pos + int64(i) + 1
			}
		}
	}
	return 0
}
