package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/client"
)

// bench is what every row shares: the gantry binary, the Docker image and
// the Kubernetes namespace (made once, when a row first needs them).
type bench struct {
	cfg    config
	dir    string // work directory: the binary, the image's files, each server's data
	gantry string
	runID  string // random, in the names this run makes outside its directory
	image  string // docker: the image built here ("" until needed)
	kube   *kubeEnv
}

func newBench(ctx context.Context, c config) (*bench, error) {
	dir, err := os.MkdirTemp("", "startbench-")
	if err != nil {
		return nil, err
	}
	var rb [4]byte
	rand.Read(rb[:])
	b := &bench{cfg: c, dir: dir, runID: hex.EncodeToString(rb[:])}
	b.gantry = c.gantry
	if b.gantry != "" {
		if b.gantry, err = filepath.Abs(b.gantry); err != nil {
			return nil, err
		}
		return b, nil
	}
	b.gantry = filepath.Join(dir, "gantry")
	log.Printf("building gantry (static) from %s", c.repo)
	build := exec.CommandContext(ctx, "go", "build", "-o", b.gantry, "./cmd/gantry")
	build.Dir = c.repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static: the Docker image may hold it
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		b.close()
		return nil, fmt.Errorf("go build ./cmd/gantry: %w", err)
	}
	return b, nil
}

// close removes the image, the namespace and the work directory.
func (b *bench) close() {
	if b.image != "" {
		if out, err := exec.Command("docker", "rmi", "-f", b.image).CombinedOutput(); err != nil {
			log.Printf("docker rmi %s: %v: %s", b.image, err, out)
		}
	}
	if b.kube != nil {
		b.kube.close()
	}
	if b.cfg.keep {
		log.Printf("kept %s", b.dir)
		return
	}
	os.RemoveAll(b.dir)
}

// server is one `gantry ws serve` with a user ("bench-…") whose token
// makes the measured workspaces, and the admin's client.
type server struct {
	b          *bench
	provider   string
	dir, data  string
	addr, base string
	cmd        *exec.Cmd
	logf       *os.File
	done       chan error // the server's exit
	db         *privateDB
	admin      *client.Client
	user       *client.Client
	owner      string
	watch      *watcher // the user's event stream
	bulkRan    bool
	bulk       *bulkLoad // the bulk load, if any
	// converging is true while the converge load's workspaces are not all
	// STANDBY (watchConverge).
	converging atomic.Bool
}

// startServer starts `ws serve --provider p` over a new data directory on
// a free loopback port and makes the bench user.
func (b *bench) startServer(ctx context.Context, p, label string) (*server, error) {
	s := &server{b: b, provider: p, dir: filepath.Join(b.dir, label)}
	s.data = filepath.Join(s.dir, "data")
	if err := os.MkdirAll(s.data, 0o700); err != nil {
		return nil, err
	}
	args, err := b.providerArgs(ctx, p, s)
	if err != nil {
		return nil, err
	}
	if b.cfg.cpuprofile != "" {
		if err := os.MkdirAll(b.cfg.cpuprofile, 0o755); err != nil {
			return nil, err
		}
		args = append(args, "--cpuprofile", filepath.Join(b.cfg.cpuprofile, label+".pprof"))
	}
	if strings.HasSuffix(label, "-converge") {
		s.bulkRan = true // at the end, delete the bench user's workspaces, not the seeded ones
		if err := seed(ctx, s.convergeDSN(), b.cfg.bulk); err != nil {
			s.close()
			return nil, err
		}
	}
	if err := s.start(ctx, args); err != nil {
		s.close()
		return nil, err
	}
	if err := s.users(ctx); err != nil {
		s.close()
		return nil, fmt.Errorf("%w\nserver log (tail):\n%s", err, s.logTail())
	}
	return s, nil
}

// providerArgs are ws serve's flags for provider p (building the Docker
// image, or making the namespace, on first use) and for -db.
func (b *bench) providerArgs(ctx context.Context, p string, s *server) ([]string, error) {
	var args []string
	switch p {
	case "docker":
		if b.image == "" {
			img, err := b.buildImage(ctx)
			if err != nil {
				return nil, err
			}
			b.image = img
		}
		args = append(args, "--provider", "docker", "--docker-image", b.image)
	case "kubernetes":
		if b.kube == nil {
			k, err := newKube(ctx, b.cfg.repo, b.cfg.kubeconfig, "startbench-"+b.runID)
			if err != nil {
				return nil, err
			}
			b.kube = k
		}
		args = append(args, "--provider", "kubernetes", "--kubeconfig", b.kube.kubeconfig, "--namespace", b.kube.ns,
			"--image", kubeImage, "--storage", "file://"+filepath.Join(s.dir, "blobs"))
	}
	if b.cfg.db != "" {
		db, err := newPrivateDB(ctx, b.cfg.db)
		if err != nil {
			return nil, err
		}
		s.db = db
		args = append(args, "--db", db.url)
	}
	return args, nil
}

func (s *server) start(ctx context.Context, extra []string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.addr = l.Addr().String()
	l.Close()
	s.base = "http://" + s.addr
	if s.logf, err = os.Create(filepath.Join(s.dir, "serve.log")); err != nil {
		return err
	}
	// The TTL manager stays out of the way: nothing idles out mid-run.
	args := append([]string{"ws", "serve", "--listen", s.addr, "--data", s.data, "--idle-timeout", "-1s", "--archive-after", "-1s"}, extra...)
	s.cmd = exec.Command(s.b.gantry, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logf, s.logf
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()
	log.Printf("gantry ws serve %s on %s (pid %d), data %s", redacted(extra), s.addr, s.cmd.Process.Pid, s.data)
	tokenFile := filepath.Join(s.data, "admin-token")
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("ws serve exited: %v\n%s", err, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		tok, err := os.ReadFile(tokenFile)
		if err == nil && len(strings.TrimSpace(string(tok))) > 0 && s.ready(ctx) {
			s.admin = &client.Client{Base: s.base, Token: strings.TrimSpace(string(tok)), HTTP: newHTTP()}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ws serve not ready in 60s (admin token: %v)\n%s", err, s.logTail())
		}
	}
}

// redacted is args joined, a URL's password hidden.
func redacted(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if u, err := url.Parse(a); err == nil && u.User != nil {
			out[i] = u.Redacted()
		}
	}
	return strings.Join(out, " ")
}

// ready reports whether the server answers /readyz.
func (s *server) ready(ctx context.Context) bool {
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// newHTTP is a client whose connections are kept for the many requests
// of a run (the default keeps 2 idle per host).
func newHTTP() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: tr}
}

// users makes the bench user's token and starts its event stream.
func (s *server) users(ctx context.Context) error {
	s.owner = "bench-" + s.b.runID
	tok, err := s.admin.CreateToken(ctx, api.TokenRequest{Owner: s.owner})
	if err != nil {
		return fmt.Errorf("create the bench user's token: %w", err)
	}
	s.user = &client.Client{Base: s.base, Token: tok.Secret, HTTP: newHTTP()}
	s.watch, err = startWatcher(ctx, s.base, tok.Secret)
	return err
}

// close deletes what the server still runs (the bench user's and the
// pool's workspaces, not the bulk's: those are STANDBY), stops the server
// and drops its database.
func (s *server) close() {
	if s.admin != nil && s.cmd != nil {
		s.deleteRunning()
	}
	if s.watch != nil {
		s.watch.close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			log.Printf("ws serve did not exit in 30 s of SIGTERM: killing pid %d", s.cmd.Process.Pid)
			s.cmd.Process.Kill()
			<-s.done
		}
	}
	s.killLeftovers()
	if s.logf != nil {
		s.logf.Close()
	}
	if s.db != nil {
		s.db.drop()
	}
	if s.b.cfg.keep {
		return
	}
	os.RemoveAll(s.dir)
}

// deleteRunning deletes the workspaces left (a start that failed, the
// pool's members) and waits (60 s at most each) until they are gone: all
// of them, or after a bulk load only the bench user's (the bulk's are
// STANDBY, and the pool's go with the pool: warm rows set it to 0).
func (s *server) deleteRunning() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := s.admin
	if s.bulkRan {
		c = s.user
	}
	if c == nil {
		return
	}
	all, err := c.List(ctx)
	if err != nil {
		log.Printf("list the workspaces to delete: %v", err)
		return
	}
	var ids []string
	for _, w := range all {
		if _, err := c.Delete(ctx, w.ID); err != nil {
			log.Printf("delete %s: %v", w.ID, err)
			continue
		}
		ids = append(ids, w.ID)
	}
	for _, id := range ids {
		if err := s.waitGone(ctx, c, id, 60*time.Second); err != nil {
			log.Printf("delete %s: %v", id, err)
		}
	}
}

// waitGone waits until workspace id is gone: its "deleted" event, or a
// 404 (polled every 200 ms besides).
func (s *server) waitGone(ctx context.Context, c *client.Client, id string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	gone := s.watch.goneCh(ctx, id)
	for {
		var ae *client.APIError
		if _, err := c.Get(ctx, id); errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			return nil
		}
		select {
		case <-gone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("workspace %s not gone after %v", id, d)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// killLeftovers kills the workspace processes (process provider:
// pidfiles in data/run) still running after the server stopped.
func (s *server) killLeftovers() {
	pids, _ := filepath.Glob(filepath.Join(s.data, "run", "*.pid"))
	for _, pf := range pids {
		b, err := os.ReadFile(pf)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		if pid, err := strconv.Atoi(f[0]); err == nil && pid > 1 && syscall.Kill(pid, 0) == nil {
			log.Printf("killing a workspace's leftover process %d", pid)
			syscall.Kill(-pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "serve.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// loadavg is /proc/loadavg's first three figures.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
