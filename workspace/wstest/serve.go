package wstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
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
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider/process"
)

// AdminTokenFile is server.AdminTokenFile (wstest cannot import server:
// server's tests import wstest); a server test checks they agree.
const AdminTokenFile = "admin-token"

// Serve is `gantry ws serve` run as a process of the test's one build of
// cmd/gantry, with the CLI against it.
type Serve struct {
	T       *testing.T
	Bin     string
	Args    []string
	CLIArgs []string // added to every client command (--ca-cert)
	URL     string
	Data    string
	Cmd     *exec.Cmd
	Log     *testutil.Buffer // the server's output, written while the test reads it
	exited  <-chan error     // Cmd's Wait, once it returns
}

// StartServe starts `gantry ws serve` on a free loopback address over db
// ("" = the default SQLite under data) and data, with short intervals and
// extra flags; it stops it (SIGTERM) and the workspaces' processes when t
// ends.
func StartServe(t *testing.T, db, data string, extra ...string) *Serve {
	addr := testutil.FreeAddr(t)
	s := &Serve{T: t, Bin: testutil.GantryBinary(t), URL: "http://" + addr, Data: data,
		Args: append([]string{"ws", "serve", "--listen", addr, "--data", data, "--interval", "300ms", "--monitor-interval", "300ms",
			"--retry-backoff", "100ms", "--op-lease", "1s", "--pool-interval", "100ms", "--log-level", "debug"}, extra...)}
	if db != "" {
		s.Args = append(s.Args, "--db", db)
	}
	s.Start()
	t.Cleanup(func() {
		s.Stop(syscall.SIGTERM)
		StopWorkspaceProcesses(t, data)
	})
	return s
}

// StopWorkspaceProcesses stops the processes of the workspaces run under
// data (the process provider's pidfiles in data/run): they outlive their
// server by design, so that a restarted one finds them, but not the test.
func StopWorkspaceProcesses(t *testing.T, data string) {
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

// Start starts the server process and waits until it says it serves (its
// "workspace: serving" line), not merely until something answers on its
// port: between a Stop and a Start another test binary may hold the port
// for a moment (a free-port probe), and a dial would reach that process.
// A server that exits first because the port is held is started again,
// for up to 20 s; any other early exit fails the test with its log.
func (s *Serve) Start() {
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.Log = new(testutil.Buffer)
		s.Cmd = exec.Command(s.Bin, s.Args...)
		s.Cmd.Stdout, s.Cmd.Stderr = s.Log, s.Log
		if err := s.Cmd.Start(); err != nil {
			s.T.Fatal(err)
		}
		exited := make(chan error, 1)
		cmd := s.Cmd
		go func() { exited <- cmd.Wait() }()
		s.exited = exited
		up, err := s.waitServing(exited, deadline)
		if up {
			return
		}
		s.Cmd = nil
		if !strings.Contains(s.Log.String(), "address already in use") || time.Now().After(deadline) {
			s.T.Fatalf("gantry ws serve exited before it served (%v):\n%s", err, Tail(s.Log.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond) // real time: a backoff for the port's other holder to let it go
	}
}

// waitServing waits for the "workspace: serving" line (up) or the process's
// exit (its error), failing the test at the deadline.
func (s *Serve) waitServing(exited <-chan error, deadline time.Time) (bool, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return false, err
		case <-tick.C:
		}
		if strings.Contains(s.Log.String(), "workspace: serving") {
			return true, nil
		}
		if time.Now().After(deadline) {
			// Not left running: StartServe's cleanup is not registered yet.
			s.Cmd.Process.Kill()
			<-exited
			s.Cmd = nil
			s.T.Fatalf("gantry ws serve: no \"workspace: serving\" after 20 s:\n%s", Tail(s.Log.String(), 3000))
		}
	}
}

// Stop signals the server and waits for it to exit.
func (s *Serve) Stop(sig syscall.Signal) {
	if s.Cmd == nil || s.Cmd.Process == nil {
		return
	}
	s.Cmd.Process.Signal(sig)
	<-s.exited
	s.Cmd = nil
}

// CLI runs `gantry --server URL ARGS…` and returns stdout; it fails the
// test on a non-zero exit.
func (s *Serve) CLI(args ...string) string {
	s.T.Helper()
	out, err := s.CLIErr(args...)
	if err != nil {
		s.T.Fatalf("gantry %s: %v\n%s\nserver log:\n%s", strings.Join(args, " "), err, out, Tail(s.Log.String(), 3000))
	}
	return out
}

// CLIErr runs the CLI like CLI and returns its output and error.
func (s *Serve) CLIErr(args ...string) (string, error) {
	cmd := exec.Command(s.Bin, append(append([]string{"ws", "--server", s.URL}, s.CLIArgs...), args...)...)
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+s.Token())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// Token is the admin token the first start wrote under --data.
func (s *Serve) Token() string {
	b, err := os.ReadFile(filepath.Join(s.Data, AdminTokenFile))
	if err != nil {
		s.T.Fatalf("admin token: %v\nserver log:\n%s", err, Tail(s.Log.String(), 3000))
	}
	return strings.TrimSpace(string(b))
}

// Get is `ws get ID --json`.
func (s *Serve) Get(id string) workspace.Workspace {
	var w workspace.Workspace
	if err := json.Unmarshal([]byte(s.CLI("get", id, "--json")), &w); err != nil {
		s.T.Fatal(err)
	}
	return w
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// WriteTree writes a small tree (a file, a script, a symlink) and a
// bigMB-MiB random file under dir.
func WriteTree(t *testing.T, dir string, bigMB int) {
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

// CountArchives counts id's archives in the fs blob store under data.
func CountArchives(t *testing.T, data, id string) int {
	n := 0
	filepath.WalkDir(filepath.Join(data, "blobs", "archives", id), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "home.tar.zst" {
			n++
		}
		return nil
	})
	return n
}

// PIDAlive reports whether id's process (its pidfile under data) runs.
func PIDAlive(t *testing.T, data, id string) bool {
	b, err := os.ReadFile(filepath.Join(data, "run", id+".pid"))
	if err != nil {
		return false
	}
	pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
	return syscall.Kill(pid, 0) == nil
}

// WaitCLI polls `ws get ID --json` until cond holds, at most d, and
// returns the row and how long it took.
func (s *Serve) WaitCLI(id string, d time.Duration, what string, cond func(workspace.Workspace) bool) (workspace.Workspace, time.Duration) {
	s.T.Helper()
	t0 := time.Now()
	var w workspace.Workspace
	WaitFor(s.T, d, what, func() (bool, string) {
		out, err := s.CLIErr("get", id, "--json")
		if err != nil {
			return false, out
		}
		w = workspace.Workspace{}
		if err := json.Unmarshal([]byte(out), &w); err != nil {
			return false, err.Error()
		}
		return cond(w), Describe(w)
	})
	return w, time.Since(t0)
}
