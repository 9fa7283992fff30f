package fsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// OwnerFile is the name of the lock file inside an owned directory. It holds the owner's pid
// and start time (for people reading it; the lock, not the text, decides ownership).
const OwnerFile = ".gantry-owner"

// ErrBusy is returned by LockDir when another live process owns the directory.
var ErrBusy = errors.New("fsutil: directory is owned by another live process")

// StaleGrace is how old a directory without an owner file must be before SweepStale removes
// it: younger ones may be in the instant between creation and locking.
const StaleGrace = time.Minute

// OwnedDir is a directory this process holds an exclusive lock on. The lock is released by
// Close, Release, or the kernel when the process dies, which is what lets SweepStale tell a
// dead owner's directory from a live one's.
type OwnedDir struct {
	Path string
	lock *os.File // the open, flock'd owner file; nil after Close/Release
}

// CreateOwnedDir creates a fresh directory parent/prefix<random> and locks it. The owner file
// is locked under a temporary name and only then renamed into place, so a concurrent
// SweepStale never finds an unlocked owner file in a live directory.
func CreateOwnedDir(parent, prefix string) (*OwnedDir, error) {
	path, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return nil, fmt.Errorf("fsutil: create temp dir in %s: %w", parent, err)
	}
	tmp := filepath.Join(path, OwnerFile+".new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		var ok bool
		if ok, err = tryLock(f); err == nil && !ok {
			err = ErrBusy // nobody else can know this name yet
		}
		if err == nil {
			writeOwner(f)
			err = os.Rename(tmp, filepath.Join(path, OwnerFile))
		}
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		os.RemoveAll(path)
		return nil, fmt.Errorf("fsutil: lock %s: %w", path, err)
	}
	return &OwnedDir{Path: path, lock: f}, nil
}

// LockDir takes ownership of path, creating it if missing. It fails with ErrBusy (wrapped,
// naming the owner) when a live process holds it; a directory left by a dead owner is taken
// over with its contents, which is how a restarted process resumes from its predecessor's files.
//
// A concurrent SweepStale may take path for a dead owner's between its
// creation and the lock, and remove it: LockDir then finds its lock file
// gone from path and starts again (a lock on a removed file would own
// nothing). A holder that lets go at once (such a sweeper) is waited for
// briefly before the directory counts as busy.
func LockDir(path string) (*OwnedDir, error) {
	var err error
	busy := 0
	for attempt := range 50 {
		var d *OwnedDir
		var retry bool
		d, retry, err = lockDirOnce(path)
		var passing *passingLock
		if errors.Is(err, ErrBusy) && !errors.As(err, &passing) {
			busy++
		}
		if !retry || busy > 5 {
			return d, err
		}
		time.Sleep(time.Duration(min(attempt+1, 10)) * 2 * time.Millisecond)
	}
	return nil, err
}

// lockDirOnce is one attempt of LockDir; retry reports that it may succeed
// if tried again (a sweep removed path meanwhile, or a short-lived holder).
func lockDirOnce(path string) (d *OwnedDir, retry bool, err error) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, false, fmt.Errorf("fsutil: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(path, OwnerFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, errors.Is(err, os.ErrNotExist), fmt.Errorf("fsutil: lock %s: %w", path, err)
	}
	ok, err := tryLock(f)
	switch {
	case err != nil:
		f.Close()
		return nil, false, fmt.Errorf("fsutil: lock %s: %w", path, err)
	case !stillAt(f, path):
		f.Close()
		return nil, true, fmt.Errorf("fsutil: lock %s: removed by a sweep while being locked", path)
	case !ok:
		owner, _ := os.ReadFile(f.Name())
		f.Close()
		err := fmt.Errorf("%w: %s (owner: %s)", ErrBusy, path, strings.TrimSpace(string(owner)))
		if strings.TrimSpace(string(owner)) == "" {
			return nil, true, &passingLock{err}
		}
		return nil, true, err
	}
	writeOwner(f)
	return &OwnedDir{Path: path, lock: f}, false, nil
}

// passingLock is ErrBusy from a lock that names no owner: a sweep about to
// move the directory away (it empties a dead owner's lock file first), or
// a LockDir between taking the lock and writing its owner. Both let go
// within moments, so LockDir keeps trying without counting it as busy (a
// loaded machine can make a sweep outlast the few tries a live owner
// gets).
type passingLock struct{ err error }

func (p *passingLock) Error() string { return p.err.Error() }
func (p *passingLock) Unwrap() error { return p.err }

// stillAt reports whether f is the lock file at path.
func stillAt(f *os.File, path string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	at, err := os.Stat(filepath.Join(path, OwnerFile))
	return err == nil && os.SameFile(fi, at)
}

// writeOwner records who holds the lock, for people reading the file.
func writeOwner(f *os.File) {
	info := "pid " + strconv.Itoa(os.Getpid()) + " started " + time.Now().UTC().Format(time.RFC3339Nano) + "\n"
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(info), 0)
	}
}

// Close removes the directory and everything in it, then releases the lock. Safe to call
// twice; a no-op after Release.
func (d *OwnedDir) Close() error {
	if d == nil || d.lock == nil {
		return nil
	}
	err := os.RemoveAll(d.Path) // while still locked: no sweeper can race us
	d.lock.Close()
	d.lock = nil
	return err
}

// Release gives up ownership and keeps the directory and its contents (for a later LockDir
// by a restarted process). Safe to call twice.
func (d *OwnedDir) Release() error {
	if d == nil || d.lock == nil {
		return nil
	}
	err := d.lock.Close()
	d.lock = nil
	return err
}

// SweepStale removes the directories directly under parent whose name starts with prefix and
// whose owner is gone (its lock is free), or that have no owner file and are older than
// StaleGrace. It returns the removed paths. A missing parent is not an error. Entries that
// are not directories, and directories owned by live processes, are left alone.
func SweepStale(parent, prefix string) ([]string, error) { return SweepStaleIdle(parent, prefix, 0) }

// SweepStaleIdle is SweepStale that leaves a dead owner's directory alone
// until nothing in it has changed for idle (its modification time): a
// process that died recently may be restarted and take its directory over
// (LockDir), files and all.
func SweepStaleIdle(parent, prefix string, idle time.Duration) ([]string, error) {
	entries, err := os.ReadDir(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fsutil: sweep %s: %w", parent, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		path := filepath.Join(parent, e.Name())
		if st, err := os.Stat(path); idle > 0 && (err != nil || time.Since(st.ModTime()) < idle) {
			continue
		}
		gone, err := sweepOne(path)
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}

func sweepOne(path string) (bool, error) {
	f, err := os.OpenFile(filepath.Join(path, OwnerFile), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		st, serr := os.Stat(path)
		if serr != nil || time.Since(st.ModTime()) < StaleGrace {
			return false, nil
		}
		// Old and ownerless: remove it holding its lock, as for a dead
		// owner's, so that a LockDir taking it over at this moment
		// either wins the lock first or sees its lock file gone and
		// starts again.
		if f, err = os.OpenFile(filepath.Join(path, OwnerFile), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
			return false, nil // removed or taken meanwhile
		}
	}
	if err != nil {
		return false, fmt.Errorf("fsutil: sweep %s: %w", path, err)
	}
	defer f.Close()
	ok, err := tryLock(f)
	if err != nil || !ok {
		return false, err // live owner (or a lock we cannot judge): leave it
	}
	// The dead owner's name goes first: a LockDir taking path over
	// meanwhile then sees a lock naming no one (passingLock) and tries
	// again rather than counting the sweep as a live owner.
	f.Truncate(0)
	// Then the directory moves out of path, lock file and all, and is
	// removed under its new name: a LockDir taking path over from here on
	// makes a fresh directory there, which the removal cannot reach. (A
	// removal in place would race it: RemoveAll may unlink the lock file
	// first, and a LockDir creating and locking a new one in the directory
	// being emptied would lose it, and its files, to the same RemoveAll.)
	// The new name keeps path's, so a sweep after a crash here finds it,
	// ownerless, and removes it.
	tomb := path + ".swept-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := os.Rename(path, tomb); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("fsutil: sweep %s: %w", path, err)
	}
	if sweepHeld != nil {
		sweepHeld(path)
	}
	return true, os.RemoveAll(tomb)
}

// sweepHeld, when set (by tests), runs while a sweep holds the lock of the
// directory it has moved away from path, before it removes it.
var sweepHeld func(path string)

// LockInPlace takes an exclusive lock on the directory path itself (created if missing),
// writing nothing into it: for a directory that holds a user's files, such as an output,
// where an owner file would be one more file of theirs. It fails with ErrBusy (wrapped) while
// another open of path holds the lock, in this process or another, through any mount of the
// same directory. Closing the returned file releases the lock, and so does the process's end.
func LockInPlace(path string) (*os.File, error) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("fsutil: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fsutil: lock %s: %w", path, err)
	}
	return holdLock(f, path)
}

// LockFile takes an exclusive lock on the regular file path (created, mode 0600, if
// missing), as LockInPlace does on a directory: ErrBusy (wrapped) while another open of it
// holds the lock; closing the returned file, or the process's end, releases it. The file is
// open for writing, so the holder may note itself in it.
func LockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fsutil: lock %s: %w", path, err)
	}
	return holdLock(f, path)
}

// holdLock is f (opened from path) once its lock is taken, else closed and the reason.
func holdLock(f *os.File, path string) (*os.File, error) {
	ok, err := tryLock(f)
	if err != nil || !ok {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%w: %s is locked", ErrBusy, path)
		}
		return nil, err
	}
	return f, nil
}
