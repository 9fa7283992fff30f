package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// TestFullCycleThroughCLI: create → up → write → archive → up, through the
// CLI against `gantry ws serve` with the process and fs providers.
func TestFullCycleThroughCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	for _, b := range []struct{ name, db string }{{"sqlite", ""}, {"postgres", "pg"}} {
		t.Run(b.name, func(t *testing.T) {
			data := t.TempDir()
			db := b.db
			if db == "pg" {
				db = storetest.PostgresDSN(t)
			}
			s := wstest.StartServe(t, db, data)
			id := strings.TrimSpace(s.CLI("create", "cycle", "--cmd", "echo started > started.txt; exec sleep 600"))
			if strings.ContainsAny(id, " \n") || id == "" {
				t.Fatalf("create printed %q, want the id alone", id)
			}
			s.CLI("up", id)
			s.CLI("wait", id, "RUNNING", "--timeout", "30s")
			if !wstest.PIDAlive(t, data, id) {
				t.Fatal("RUNNING but no live process")
			}
			w := s.Get(id)
			if w.Volume != filepath.Join(data, "volumes", id) {
				t.Fatalf("volume = %q", w.Volume)
			}
			// RUNNING means the process lives; under load its shell may not
			// have written started.txt yet, which the digest would then miss.
			wstest.WaitFor(t, 10*time.Second, "the command's started.txt", func() (bool, string) {
				b, err := os.ReadFile(filepath.Join(w.Volume, "started.txt"))
				return err == nil && string(b) == "started\n", fmt.Sprint(err)
			})
			wstest.WriteTree(t, w.Volume, 2)
			before := treeDigest(t, w.Volume)

			s.CLI("archive", id)
			s.CLI("wait", id, "PENDING", "--timeout", "30s")
			w = s.Get(id)
			if _, err := os.Stat(w.Volume); !os.IsNotExist(err) {
				t.Fatalf("volume still there after archive: %v", err)
			}
			if wstest.PIDAlive(t, data, id) {
				t.Fatal("process alive after archive")
			}
			blob := filepath.Join(data, "blobs", filepath.FromSlash(w.ArchiveKey))
			for _, p := range []string{blob, blob + ".meta"} {
				if _, err := os.Stat(p); err != nil {
					t.Fatalf("archive file missing: %v", err)
				}
			}
			s.CLI("up", id)
			s.CLI("wait", id, "RUNNING", "--timeout", "30s")
			// The restarted command rewrites started.txt (truncate, then
			// write): a digest read in between differs for a moment.
			wstest.WaitFor(t, 10*time.Second, "the restored tree to equal the archived one", func() (bool, string) {
				after := treeDigest(t, w.Volume)
				return after == before, "tree sha256 after restore " + after + ", before " + before
			})
			s.CLI("delete", id)
			s.CLI("wait", id, "DELETED", "--timeout", "30s")
			if wstest.PIDAlive(t, data, id) {
				t.Fatal("process alive after delete")
			}
		})
	}
}

// TestCrashDuringArchivingAndRestoring SIGKILLs the server while the
// operation is in flight, restarts it, and checks convergence, the data and
// that exactly one archive was written.
func TestCrashDuringArchivingAndRestoring(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	data := t.TempDir()
	s := wstest.StartServe(t, "", data)
	id := strings.TrimSpace(s.CLI("create", "crash"))
	s.CLI("wait", id, "STANDBY", "--timeout", "30s")
	vol := s.Get(id).Volume
	wstest.WriteTree(t, vol, 96)
	before := treeDigest(t, vol)

	killDuring := func(op workspace.Operation, desired string, want workspace.Status) {
		s.CLI(desired, id)
		c := &client.Client{Base: s.URL, Token: s.Token()}
		// Catch the operation while it is in flight, to kill the server then.
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%s in flight", op), func() (bool, string) {
			w, err := c.Get(t.Context(), id)
			return err == nil && w.Operation == op, wstest.Describe(w)
		})
		s.Stop(syscall.SIGKILL)
		s.Start()
		s.CLI("wait", id, string(want), "--timeout", "60s")
	}
	killDuring(workspace.OpArchiving, "archive", workspace.Pending)
	if n := wstest.CountArchives(t, data, id); n != 1 {
		t.Fatalf("%d archives written, want 1", n)
	}
	if _, err := os.Stat(vol); !os.IsNotExist(err) {
		t.Fatal("volume survived the archive")
	}
	killDuring(workspace.OpRestoring, "down", workspace.Standby)
	if after := treeDigest(t, vol); after != before {
		t.Fatalf("tree after crash+restore %s, before %s", after, before)
	}
	if n := wstest.CountArchives(t, data, id); n != 1 {
		t.Fatalf("%d archives after restore, want 1", n)
	}
}

func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	d, err := archive.TreeDigest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
