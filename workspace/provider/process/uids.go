package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gantryhq/gantry/internal/fsutil"
)

// IDRange is a range of user (and group) ids: First to First+Count-1.
type IDRange struct{ First, Count uint32 }

// DefaultUIDs is the range workspaces' users come from when UIDs is zero:
// 2000000-2065535, far above the ids distributions give to people and
// services, and one id per workspace on this host at a time.
var DefaultUIDs = IDRange{First: 2_000_000, Count: 65_536}

func (r IDRange) String() string {
	return fmt.Sprintf("%d-%d", r.First, uint64(r.First)+uint64(r.Count)-1)
}

// ParseIDRange reads "FIRST-LAST" (both included).
func ParseIDRange(s string) (IDRange, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(a, 10, 32)
	last, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil || last < first {
		return IDRange{}, fmt.Errorf("process: id range %q: want FIRST-LAST, e.g. %s", s, DefaultUIDs)
	}
	r := IDRange{First: uint32(first), Count: uint32(last - first + 1)}
	return r, r.check()
}

// check refuses a range with root's id in it, or the id -1 ("none").
func (r IDRange) check() error {
	if r == (IDRange{}) {
		return nil
	}
	if r.First == 0 || r.Count == 0 || uint64(r.First)+uint64(r.Count) > 1<<32-1 {
		return fmt.Errorf("process: uid range %d+%d: want ids from 1 to 4294967294", r.First, r.Count)
	}
	return nil
}

func (c *Container) uidRange() IDRange {
	if c.UIDs == (IDRange{}) {
		return DefaultUIDs
	}
	return c.UIDs
}

// DefaultUIDTable is where UIDTable is when not set.
const DefaultUIDTable = "/var/lib/gantry/workspace-uids.json"

func (c *Container) uidTable() string {
	if c.UIDTable == "" {
		return DefaultUIDTable
	}
	return c.UIDTable
}

// uidTable is the file UIDTable: which workspace (RunDir and id) holds
// which uid. Users are the host's, so the table is too: two servers on one
// host (two --data directories) never give one uid to two workspaces. A
// uid is held while its workspace's volume exists or a process runs as it;
// the next allocation releases the others (a deleted or archived
// workspace's: a delete reaches the provider as a Stop, then the volume's
// removal). Allocations go round the range, so a released uid is given
// again only after the others were, and never while a process runs as it.
// The table is rewritten whole (atomically) under an flock on
// UIDTable+".lock", so concurrent starts never give one uid twice.
type uidTable struct {
	Next    uint32               `json:"next"` // offset in the range to try first
	Holders map[uint32]uidHolder `json:"holders"`
}

type uidHolder struct {
	Run    string `json:"run"` // the Container's RunDir
	ID     string `json:"id"`
	Volume string `json:"volume"`
}

// allocateUID returns workspace id's uid: the one it holds, or a free one.
func (c *Container) allocateUID(id, vol string) (int, error) {
	run, err := filepath.Abs(c.RunDir)
	if err != nil {
		return 0, err
	}
	unlock, err := c.lockUIDs()
	if err != nil {
		return 0, err
	}
	defer unlock()
	t, err := c.readUIDs()
	if err != nil {
		return 0, err
	}
	me := uidHolder{Run: run, ID: id, Volume: vol}
	if uid, ok := t.held(c.uidRange(), me); ok {
		if t.Holders[uid] != me { // the same workspace, its volume moved
			t.Holders[uid] = me
			return int(uid), c.writeUIDs(t)
		}
		return int(uid), nil
	}
	live := liveUIDs()
	t.release(me, live)
	uid, err := t.pick(c.uidRange(), live)
	if err != nil {
		return 0, err
	}
	t.Holders[uid] = me
	return int(uid), c.writeUIDs(t)
}

// held finds the uid in r that me's workspace holds.
func (t *uidTable) held(r IDRange, me uidHolder) (uint32, bool) {
	for uid, h := range t.Holders {
		if h.Run == me.Run && h.ID == me.ID && uid >= r.First && uid-r.First < r.Count {
			return uid, true
		}
	}
	return 0, false
}

// release drops the uids whose volume is gone and that no live process
// runs as, and one me's workspace holds outside the range.
func (t *uidTable) release(me uidHolder, live map[uint32]bool) {
	for uid, h := range t.Holders {
		_, err := os.Lstat(h.Volume)
		if h.Run == me.Run && h.ID == me.ID || !live[uid] && errors.Is(err, os.ErrNotExist) {
			delete(t.Holders, uid)
		}
	}
}

// pick takes the next uid of r, going round, that nobody holds or runs as.
func (t *uidTable) pick(r IDRange, live map[uint32]bool) (uint32, error) {
	for i := range r.Count {
		off := (t.Next + i) % r.Count
		uid := r.First + off
		if _, held := t.Holders[uid]; held || live[uid] {
			continue
		}
		t.Next = (off + 1) % r.Count
		return uid, nil
	}
	return 0, fmt.Errorf("process: every workspace uid in %s is taken (%d workspaces on this host have volumes): widen ws serve --workspace-uids", r, len(t.Holders))
}

// lockUIDs takes the table's flock; the returned func releases it.
func (c *Container) lockUIDs() (func(), error) {
	if err := os.MkdirAll(filepath.Dir(c.uidTable()), 0o700); err != nil {
		return nil, fmt.Errorf("process: the uid table: %w", err)
	}
	f, err := os.OpenFile(c.uidTable()+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("process: the uid table: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("process: locking the uid table: %w", err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

func (c *Container) readUIDs() (*uidTable, error) {
	t := &uidTable{Holders: map[uint32]uidHolder{}}
	b, err := os.ReadFile(c.uidTable())
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("process: %s: %w", c.uidTable(), err)
	}
	if t.Holders == nil {
		t.Holders = map[uint32]uidHolder{}
	}
	return t, nil
}

func (c *Container) writeUIDs(t *uidTable) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(c.uidTable(), b, 0o600)
}

// mkRunDir makes RunDir, mode 0700 (pidfiles, logs, the uid table).
func (c *Container) mkRunDir() error {
	if err := os.MkdirAll(c.RunDir, 0o700); err != nil {
		return err
	}
	return os.Chmod(c.RunDir, 0o700)
}
