package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// env is `gantry ws serve` with alice's workspace "bench" RUNNING
// `appbench upstream`, her app cookie and her ssh config.
type env struct {
	cfg                config
	dir, data, gantry  string
	addr, base         string // the server's host:port and http://host:port
	serve              *exec.Cmd
	serveLog           *os.File
	alice              string // alice's token
	id, name, url      string // the workspace and its app's URL
	cookie             string // alice's gantry_app cookie for the app's host
	sshConfig, ctlPath string
	upstreamPort       string
	closed             bool
}

const wsName = "bench"

// setup builds gantry (unless -gantry), starts `ws serve` on a free
// loopback port over a temporary data directory and brings up the
// workspace.
func setup(c config) (*env, error) {
	dir, err := os.MkdirTemp("", "appbench-")
	if err != nil {
		return nil, err
	}
	// The workspace's own user runs appbench from here.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	e := &env{cfg: c, dir: dir, data: filepath.Join(dir, "data"), name: wsName}
	if err := e.binaries(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.start(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.workspace(); err != nil {
		e.close()
		return nil, fmt.Errorf("%w\nserver log (tail):\n%s", err, e.logTail())
	}
	return e, nil
}

// binaries puts appbench (this program) and gantry into the work directory.
func (e *env) binaries() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.dir, "appbench"), b, 0o755); err != nil {
		return err
	}
	e.gantry = e.cfg.gantry
	if e.gantry != "" {
		e.gantry, err = filepath.Abs(e.gantry)
		return err
	}
	e.gantry = filepath.Join(e.dir, "gantry")
	log.Printf("building gantry from %s", e.cfg.repo)
	build := exec.Command("go", "build", "-o", e.gantry, "./cmd/gantry")
	build.Dir = e.cfg.repo
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

// start starts `gantry ws serve` with its defaults on a free loopback port.
func (e *env) start() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	e.addr = l.Addr().String()
	l.Close()
	e.base = "http://" + e.addr
	if err := os.Mkdir(e.data, 0o700); err != nil {
		return err
	}
	if e.serveLog, err = os.Create(filepath.Join(e.dir, "serve.log")); err != nil {
		return err
	}
	args := []string{"ws", "serve", "--listen", e.addr, "--data", e.data}
	if e.cfg.cpuprofile != "" {
		p, err := filepath.Abs(e.cfg.cpuprofile)
		if err != nil {
			return err
		}
		args = append([]string{"--cpuprofile", p}, args...)
	}
	e.serve = exec.Command(e.gantry, args...)
	e.serve.Stdout, e.serve.Stderr = e.serveLog, e.serveLog
	if err := e.serve.Start(); err != nil {
		return err
	}
	log.Printf("gantry ws serve on %s (pid %d), work directory %s", e.addr, e.serve.Process.Pid, e.dir)
	return waitFor(20*time.Second, "the server's admin token", func() error {
		if c, err := net.Dial("tcp", e.addr); err != nil {
			return err
		} else {
			c.Close()
		}
		_, err := os.Stat(filepath.Join(e.data, "admin-token"))
		return err
	})
}

// workspace creates alice, her workspace running `appbench upstream`, logs
// her in at its app and writes her ssh config.
func (e *env) workspace() error {
	admin, err := os.ReadFile(filepath.Join(e.data, "admin-token"))
	if err != nil {
		return err
	}
	out, err := e.cli(strings.TrimSpace(string(admin)), "token", "create", "--owner", "alice")
	if err != nil {
		return err
	}
	e.alice = strings.TrimSpace(out)
	up := filepath.Join(e.dir, "appbench") + " upstream"
	if out, err = e.cli(e.alice, "create", e.name, "--desired", "RUNNING", "--http", "--cmd", "exec "+up); err != nil {
		return err
	}
	e.id = strings.TrimSpace(out)
	if _, err = e.cli(e.alice, "wait", e.id, "RUNNING", "--timeout", "60s"); err != nil {
		return err
	}
	if out, err = e.cli(e.alice, "get", e.id, "--json"); err != nil {
		return err
	}
	var row struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(out), &row); err != nil || row.URL == "" {
		return fmt.Errorf("ws get --json: no url (%v): %s", err, out)
	}
	e.url = strings.TrimSuffix(row.URL, "/")
	log.Printf("workspace %s (%s) RUNNING, app %s/", e.name, e.id, e.url)
	if err := e.login(); err != nil {
		return err
	}
	e.sshConfig = filepath.Join(e.dir, "ssh", "ssh_config")
	e.ctlPath = filepath.Join(e.dir, "ssh", "cm") // one host: no %C
	_, err = e.cli(e.alice, "config-ssh", "--file", e.sshConfig)
	return err
}

// cli runs `gantry ws --server BASE ARGS…` with token and returns stdout.
func (e *env) cli(token string, args ...string) (string, error) {
	cmd := exec.Command(e.gantry, append([]string{"ws", "--server", e.base}, args...)...)
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("gantry ws %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// close stops the ssh master, the workspace (its processes outlive the
// server by design), then the server, and removes the work directory.
func (e *env) close() {
	if e.closed {
		return
	}
	e.closed = true
	if e.sshConfig != "" {
		e.sshCmd(append(e.mux("no"), "-O", "exit", "gantry-"+e.name)...).Run()
	}
	if e.id != "" {
		if _, err := e.cli(e.alice, "down", e.id); err != nil {
			log.Printf("ws down: %v", err)
		} else if _, err := e.cli(e.alice, "wait", e.id, "STANDBY", "--timeout", "30s"); err != nil {
			log.Printf("ws wait STANDBY: %v", err)
		}
	}
	if e.serve != nil && e.serve.Process != nil {
		e.serve.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- e.serve.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			log.Printf("ws serve did not exit in 30 s of SIGTERM: killing pid %d", e.serve.Process.Pid)
			e.serve.Process.Kill()
			<-done
		}
	}
	e.killLeftovers()
	if e.serveLog != nil {
		e.serveLog.Close()
	}
	if e.cfg.keep {
		log.Printf("kept %s", e.dir)
		return
	}
	os.RemoveAll(e.dir)
}

// killLeftovers kills the workspace processes still running (pidfiles in
// data/run) if stopping the workspace failed.
func (e *env) killLeftovers() {
	pids, _ := filepath.Glob(filepath.Join(e.data, "run", "*.pid"))
	for _, pf := range pids {
		if pid, err := pidOf(pf); err == nil && syscall.Kill(pid, 0) == nil {
			log.Printf("killing the workspace's leftover process %d", pid)
			syscall.Kill(-pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// pidOf reads the pid (the first field) of a process provider's pidfile.
func pidOf(pidfile string) (int, error) {
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("empty pidfile " + pidfile)
	}
	return strconv.Atoi(f[0])
}

func (e *env) logTail() string {
	b, _ := os.ReadFile(filepath.Join(e.dir, "serve.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// waitFor polls f every 50 ms until it returns nil, at most d.
func waitFor(d time.Duration, what string, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting %v for %s: %w", d, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpuOf is the user + system CPU time so far of process pid.
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
}
