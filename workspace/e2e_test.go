package workspace

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/process"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// gantryBinary is the test process's one build of cmd/gantry.
func gantryBinary(t *testing.T) string { return testutil.GantryBinary(t) }

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type e2eServer struct {
	t       *testing.T
	bin     string
	args    []string
	cliArgs []string // added to every client command (--ca-cert)
	url     string
	data    string
	cmd     *exec.Cmd
	log     *bytes.Buffer
}

func startServe(t *testing.T, db, data string, extra ...string) *e2eServer {
	addr := freeAddr(t)
	s := &e2eServer{t: t, bin: gantryBinary(t), url: "http://" + addr, data: data,
		args: append([]string{"ws", "serve", "--listen", addr, "--data", data, "--interval", "300ms", "--monitor-interval", "300ms",
			"--retry-backoff", "100ms", "--op-lease", "1s", "--log-level", "debug"}, extra...)}
	if db != "" {
		s.args = append(s.args, "--db", db)
	}
	s.start()
	t.Cleanup(func() {
		s.stop(syscall.SIGTERM)
		stopWorkspaceProcesses(t, data)
	})
	return s
}

// stopWorkspaceProcesses stops the processes of the workspaces run under
// data (the process provider's pidfiles in data/run): they outlive their
// server by design, so that a restarted one finds them, but not the test.
func stopWorkspaceProcesses(t *testing.T, data string) {
	c := &process.Container{RunDir: filepath.Join(data, "run"), StopGrace: time.Second}
	pidfiles, _ := filepath.Glob(filepath.Join(c.RunDir, "*.pid"))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, pf := range pidfiles {
		id := strings.TrimSuffix(filepath.Base(pf), ".pid")
		wg.Go(func() {
			if err := c.Stop(ctx, id); err != nil {
				t.Logf("stop workspace %s's process: %v", id, err)
			}
		})
	}
	wg.Wait()
}

func (s *e2eServer) start() {
	s.log = new(bytes.Buffer)
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	waitFor(s.t, 20*time.Second, "server up", func() (bool, string) {
		c, err := net.Dial("tcp", s.url[strings.Index(s.url, "://")+3:])
		if err == nil {
			c.Close()
		}
		return err == nil, fmt.Sprint(err)
	})
}

func (s *e2eServer) stop(sig syscall.Signal) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	s.cmd.Wait()
	s.cmd = nil
}

// cli runs `gantry --server URL ARGS…` and returns stdout; it fails the
// test on a non-zero exit.
func (s *e2eServer) cli(args ...string) string {
	s.t.Helper()
	out, err := s.cliErr(args...)
	if err != nil {
		s.t.Fatalf("gantry %s: %v\n%s\nserver log:\n%s", strings.Join(args, " "), err, out, tail(s.log.String(), 3000))
	}
	return out
}

func (s *e2eServer) cliErr(args ...string) (string, error) {
	cmd := exec.Command(s.bin, append(append([]string{"ws", "--server", s.url}, s.cliArgs...), args...)...)
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+s.token())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// token is the admin token the first start wrote under --data.
func (s *e2eServer) token() string {
	b, err := os.ReadFile(filepath.Join(s.data, AdminTokenFile))
	if err != nil {
		s.t.Fatalf("admin token: %v\nserver log:\n%s", err, tail(s.log.String(), 3000))
	}
	return strings.TrimSpace(string(b))
}

func (s *e2eServer) get(id string) Workspace {
	var w Workspace
	if err := json.Unmarshal([]byte(s.cli("get", id, "--json")), &w); err != nil {
		s.t.Fatal(err)
	}
	return w
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func writeTree(t *testing.T, dir string, bigMB int) {
	os.MkdirAll(filepath.Join(dir, "src/pkg"), 0o755)
	os.WriteFile(filepath.Join(dir, "src/pkg/a.go"), []byte("package pkg\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "script.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.Symlink("src/pkg/a.go", filepath.Join(dir, "link"))
	big := make([]byte, bigMB<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
}

func countArchives(t *testing.T, data, id string) int {
	n := 0
	filepath.WalkDir(filepath.Join(data, "blobs", "archives", id), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "home.tar.zst" {
			n++
		}
		return nil
	})
	return n
}

func pidAlive(t *testing.T, data, id string) bool {
	b, err := os.ReadFile(filepath.Join(data, "run", id+".pid"))
	if err != nil {
		return false
	}
	pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
	return syscall.Kill(pid, 0) == nil
}

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
			s := startServe(t, db, data)
			id := strings.TrimSpace(s.cli("create", "cycle", "--cmd", "echo started > started.txt; exec sleep 600"))
			if strings.ContainsAny(id, " \n") || id == "" {
				t.Fatalf("create printed %q, want the id alone", id)
			}
			s.cli("up", id)
			s.cli("wait", id, "RUNNING", "--timeout", "30s")
			if !pidAlive(t, data, id) {
				t.Fatal("RUNNING but no live process")
			}
			w := s.get(id)
			if w.Volume != filepath.Join(data, "volumes", id) {
				t.Fatalf("volume = %q", w.Volume)
			}
			// RUNNING means the process lives; under load its shell may not
			// have written started.txt yet, which the digest would then miss.
			waitFor(t, 10*time.Second, "the command's started.txt", func() (bool, string) {
				b, err := os.ReadFile(filepath.Join(w.Volume, "started.txt"))
				return err == nil && string(b) == "started\n", fmt.Sprint(err)
			})
			writeTree(t, w.Volume, 2)
			before := treeDigest(t, w.Volume)

			s.cli("archive", id)
			s.cli("wait", id, "PENDING", "--timeout", "30s")
			w = s.get(id)
			if _, err := os.Stat(w.Volume); !os.IsNotExist(err) {
				t.Fatalf("volume still there after archive: %v", err)
			}
			if pidAlive(t, data, id) {
				t.Fatal("process alive after archive")
			}
			blob := filepath.Join(data, "blobs", filepath.FromSlash(w.ArchiveKey))
			for _, p := range []string{blob, blob + ".meta"} {
				if _, err := os.Stat(p); err != nil {
					t.Fatalf("archive file missing: %v", err)
				}
			}
			s.cli("up", id)
			s.cli("wait", id, "RUNNING", "--timeout", "30s")
			// The restarted command rewrites started.txt (truncate, then
			// write): a digest read in between differs for a moment.
			waitFor(t, 10*time.Second, "the restored tree to equal the archived one", func() (bool, string) {
				after := treeDigest(t, w.Volume)
				return after == before, "tree sha256 after restore " + after + ", before " + before
			})
			s.cli("delete", id)
			s.cli("wait", id, "DELETED", "--timeout", "30s")
			if pidAlive(t, data, id) {
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
	s := startServe(t, "", data)
	id := strings.TrimSpace(s.cli("create", "crash"))
	s.cli("wait", id, "STANDBY", "--timeout", "30s")
	vol := s.get(id).Volume
	writeTree(t, vol, 96)
	before := treeDigest(t, vol)

	killDuring := func(op Operation, desired string, want Status) {
		s.cli(desired, id)
		c := &Client{Base: s.url, Token: s.token()}
		// Catch the operation while it is in flight, to kill the server then.
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%s in flight", op), func() (bool, string) {
			w, err := c.Get(t.Context(), id)
			return err == nil && w.Operation == op, describe(w)
		})
		s.stop(syscall.SIGKILL)
		s.start()
		s.cli("wait", id, string(want), "--timeout", "60s")
	}
	killDuring(OpArchiving, "archive", Pending)
	if n := countArchives(t, data, id); n != 1 {
		t.Fatalf("%d archives written, want 1", n)
	}
	if _, err := os.Stat(vol); !os.IsNotExist(err) {
		t.Fatal("volume survived the archive")
	}
	killDuring(OpRestoring, "down", Standby)
	if after := treeDigest(t, vol); after != before {
		t.Fatalf("tree after crash+restore %s, before %s", after, before)
	}
	if n := countArchives(t, data, id); n != 1 {
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
