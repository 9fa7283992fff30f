package singletons

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/fs"
	"github.com/gantryhq/gantry/workspace/store/memstore"
)

// The GC's rules one by one: keep the newest N and the chosen archive,
// leftovers only once old, a deleted workspace's blobs only after the
// retention, and nothing of an unknown id while the database is empty.
func TestArchiveGCRules(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	bs := &fs.BlobStore{Dir: filepath.Join(dir, "blobs")}
	storage := &archive.Storage{Root: filepath.Join(dir, "volumes"), Blobs: bs}
	st := memstore.New()
	now := time.Now()
	vol := t.TempDir()
	os.WriteFile(filepath.Join(vol, "f"), []byte("x"), 0o644)
	// age sets every blob of key to have been written ago.
	age := func(key string, ago time.Duration) {
		for _, k := range []string{key, provider.MetaKey(key)} {
			os.Chtimes(filepath.Join(bs.Dir, k), now.Add(-ago), now.Add(-ago))
		}
	}
	write := func(id, op string, ago time.Duration) string {
		key := provider.ArchiveKey(id, op)
		if _, err := archive.Write(ctx, bs, key, vol); err != nil {
			t.Fatal(err)
		}
		age(key, ago)
		return key
	}
	keys := func(id string) []string {
		list, err := storage.Archives(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range list {
			out = append(out, a.Key)
		}
		return out
	}
	gc := &ArchiveGC{Store: st, Storage: storage, Keep: 2, Retention: time.Hour}

	// An empty database removes nothing it did not delete itself.
	orphan := write("0198-orphan", "op1", 48*time.Hour)
	if n, err := gc.Collect(ctx, now); err != nil || n != 0 || len(keys("0198-orphan")) != 1 {
		t.Fatalf("empty database: removed %d (%v); the orphan must stay", n, err)
	}

	w, _ := st.Create(ctx, workspace.NewWorkspace{Name: "w"}, now)
	a1 := write(w.ID, "op1", 4*time.Hour)
	a2 := write(w.ID, "op2", 3*time.Hour)
	a3 := write(w.ID, "op3", 2*time.Hour)
	a4 := write(w.ID, "op4", time.Hour)
	if _, err := st.ChooseArchive(ctx, w.ID, a1, now); err != nil { // the oldest is the one to restore
		t.Fatal(err)
	}
	young := provider.ArchiveKey(w.ID, "op5") // a write in progress: no .meta
	old := provider.ArchiveKey(w.ID, "op0")   // an interrupted write of yesterday
	bs.Put(ctx, young, strings.NewReader("partial"))
	bs.Put(ctx, old, strings.NewReader("partial"))
	age(old, 25*time.Hour)

	n, err := gc.Collect(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(w.ID), []string{young, a4, a3, a1}; !slices.Equal(got, want) || n != 3 {
		t.Fatalf("after a pass: removed %d, left %q; want %q (the newest two, the chosen one, the young leftover)", n, got, want)
	}
	if _, ok, _ := bs.Stat(ctx, a2); ok {
		t.Fatal("a surplus archive is still there")
	}
	// Now the database is not empty: the orphan (last written 48 h ago)
	// goes; a deleted workspace's archives wait for the retention.
	gone := workspace.Workspace{ID: "0199-deleted-just-now"} // its row is gone; the reconciler left a tombstone
	write(gone.ID, "op1", 5*time.Hour)
	storage.Tombstone(ctx, gone.ID, now)
	if _, err := gc.Collect(ctx, now.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := bs.Stat(ctx, orphan); ok {
		t.Fatal("the orphan is still there")
	}
	if len(keys(gone.ID)) != 1 {
		t.Fatal("a deleted workspace's archive went before the retention")
	}
	gc.Collect(ctx, now.Add(61*time.Minute))
	if left, _ := bs.List(ctx, "archives/"+gone.ID+"/"); len(left) != 0 {
		t.Fatalf("after the retention: %v left", left)
	}
}
