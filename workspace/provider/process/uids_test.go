package process

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestUIDAllocation: concurrent allocations (two Containers over one
// RunDir, and a second RunDir: two servers on one host) never give one uid
// twice; a workspace keeps its uid across restarts (a new Container); a
// full range is refused with the flag to widen; a uid is released once its
// workspace's volume is gone, and given again only after the others.
func TestUIDAllocation(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "host", "uids.json")
	r := IDRange{First: 3_000_000, Count: 6} // no process runs as these
	a := &Container{RunDir: filepath.Join(dir, "a", "run"), UIDs: r, UIDTable: table}
	a2 := &Container{RunDir: a.RunDir, UIDs: r, UIDTable: table}
	b := &Container{RunDir: filepath.Join(dir, "b", "run"), UIDs: r, UIDTable: table}
	vol := func(c *Container, id string) string {
		v := filepath.Join(filepath.Dir(c.RunDir), "volumes", id)
		os.MkdirAll(v, 0o755)
		return v
	}
	var mu sync.Mutex
	got := map[int]string{}
	var wg sync.WaitGroup
	for i, c := range []*Container{a, a2, b, a, a2, b} {
		id := fmt.Sprintf("w%d", i)
		if i == 2 {
			id = "w0" // a's w0's id in b's RunDir: another workspace
		}
		wg.Go(func() {
			uid, err := c.allocateUID(id, vol(c, id))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
			} else if prev, dup := got[uid]; dup {
				t.Errorf("uid %d given to %s and to %s of %s", uid, prev, id, c.RunDir)
			}
			got[uid] = id + "@" + c.RunDir
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(got) != 6 {
		t.Fatalf("6 workspaces, %d uids: %v", len(got), got)
	}
	again := &Container{RunDir: a.RunDir, UIDs: r, UIDTable: table}
	u1, err := again.allocateUID("w1", vol(a, "w1"))
	if err != nil || !strings.HasPrefix(got[u1], "w1@") {
		t.Fatalf("w1 after a restart: uid %d (%s), %v", u1, got[u1], err)
	}
	if _, err := a.allocateUID("w9", vol(a, "w9")); err == nil || !strings.Contains(err.Error(), "--workspace-uids") {
		t.Fatalf("a seventh workspace in a range of six: %v", err)
	}
	os.RemoveAll(vol(a, "w1")) // deleted (or archived)
	u9, err := a.allocateUID("w9", vol(a, "w9"))
	if err != nil || u9 != u1 {
		t.Fatalf("w9 after w1's volume went: uid %d, %v; want w1's %d", u9, err, u1)
	}
	if fi, err := os.Stat(table); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the table: %v %v", fi, err)
	}
}

func TestParseIDRange(t *testing.T) {
	for in, want := range map[string]string{"2000000-2065535": "2000000-2065535", "5-5": "5-5", "0-10": "", "10-5": "", "x": "", "1-4294967295": ""} {
		r, err := ParseIDRange(in)
		if (err == nil) != (want != "") || err == nil && r.String() != want {
			t.Errorf("ParseIDRange(%q) = %v, %v; want %q", in, r, err, want)
		}
	}
}
