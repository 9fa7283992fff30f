package testutil

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisServer is a redis-server of one test's own, on a free loopback port,
// for tests that stop, kill or restart Redis (the shared one of Redis(t)
// must stay up). Its data directory is Dir; it saves nothing unless Args
// say so. The test's cleanup stops it.
type RedisServer struct {
	tb   testing.TB
	Dir  string
	Args []string // redis-server's arguments; Start uses them as they then are
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// StartRedis starts a RedisServer with redis-server's extra arguments and
// waits until it accepts connections (it may still answer LOADING).
func StartRedis(tb testing.TB, extra ...string) *RedisServer {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &RedisServer{tb: tb, Dir: tb.TempDir(), port: port}
	r.Args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", r.Dir, "--save", ""}, extra...)
	r.Start()
	tb.Cleanup(r.Stop)
	return r
}

// Addr is the server's "127.0.0.1:port".
func (r *RedisServer) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// Start starts the server (again, after Stop or Kill) with Args, on the
// same port and directory, and waits until it accepts connections.
func (r *RedisServer) Start() {
	r.tb.Helper()
	r.cmd = exec.Command("redis-server", r.Args...)
	r.cmd.Stdout, _ = os.Create(filepath.Join(r.Dir, "redis.log"))
	if err := r.cmd.Start(); err != nil {
		r.tb.Fatalf("start redis-server: %v", err)
	}
	done := make(chan struct{})
	r.done = done
	go func(c *exec.Cmd) { c.Wait(); close(done) }(r.cmd)
	WaitFor(r.tb, 10*time.Second, "redis at "+r.Addr()+" to accept connections", func() (bool, string) {
		return reachable(r.Addr()), "unreachable"
	})
}

// Stop shuts the server down as SIGINT does (SHUTDOWN: an AOF is flushed
// as configured), killing it after 10 s. Stopping a stopped server does
// nothing.
func (r *RedisServer) Stop() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.Kill()
	}
	r.cmd = nil
}

// Kill ends the server at once (SIGKILL: no goodbye, as a crash).
func (r *RedisServer) Kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
	r.cmd = nil
}

// RedisCommand sends one command to the Redis at addr and returns the first
// line of its reply (no client library: the test speaks RESP itself, so it
// sees replies such as -LOADING that a client would act on).
func RedisCommand(tb testing.TB, addr string, args ...string) string {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		tb.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(line)
}

// RestartLoading fills the server with keys keys, saves them and restarts
// it reading them back slowly (--key-load-delay), so that it answers
// LOADING for about keys × 0.2 ms; it fails the test unless the server
// answers LOADING right after the restart.
func (r *RedisServer) RestartLoading(keys int) {
	r.tb.Helper()
	fill := "for i = 1, " + strconv.Itoa(keys) + " do redis.call('SET', 'filler:' .. i, i) end return 1"
	if reply := RedisCommand(r.tb, r.Addr(), "EVAL", fill, "0"); reply != ":1" {
		r.tb.Fatalf("fill: %s", reply)
	}
	if reply := RedisCommand(r.tb, r.Addr(), "SAVE"); reply != "+OK" {
		r.tb.Fatalf("SAVE: %s", reply)
	}
	r.Stop()
	r.Args = append(r.Args, "--key-load-delay", "100", "--loading-process-events-interval-bytes", "1024")
	r.Start()
	if reply := RedisCommand(r.tb, r.Addr(), "PING"); !strings.HasPrefix(reply, "-LOADING") {
		r.tb.Fatalf("right after the restart PING answered %q, want -LOADING (the test needs a loading server)", reply)
	}
}
