package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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
	r := &RedisServer{tb: tb, Dir: tb.TempDir()}
	r.startOnFreePort(func(port int) []string {
		return append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", r.Dir, "--save", ""}, extra...)
	})
	return r
}

// startOnFreePort starts the server with args(port) on a loopback port
// found free, trying another port when the server could not have it (some
// other process took it between the check and the start), and stops it at
// the test's cleanup.
func (r *RedisServer) startOnFreePort(args func(port int) []string) {
	r.tb.Helper()
	for attempt := 1; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			r.tb.Fatal(err)
		}
		r.port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		r.Args = args(r.port)
		err = r.launch()
		if err == nil {
			r.tb.Cleanup(r.Stop)
			return
		}
		if attempt == 5 {
			r.tb.Fatalf("start redis-server: %v", err)
		}
	}
}

// Port is the server's port.
func (r *RedisServer) Port() int { return r.port }

// Addr is the server's "127.0.0.1:port".
func (r *RedisServer) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// Start starts the server (again, after Stop or Kill) with Args, on the
// same port and directory, and waits until it accepts connections.
func (r *RedisServer) Start() {
	r.tb.Helper()
	if err := r.launch(); err != nil {
		r.tb.Fatalf("start redis-server: %v", err)
	}
}

// launch starts redis-server with Args and waits until the server on the
// port is this one (INFO's process_id), up to 10 s; an error if it exited
// first (the port was taken, a bad argument: its log tells) or another
// process answers there.
func (r *RedisServer) launch() error {
	cmd := exec.Command("redis-server", r.Args...)
	logName := filepath.Join(r.Dir, "redis.log")
	cmd.Stdout, _ = os.Create(logName)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-done:
			r.cmd = nil
			log, _ := os.ReadFile(logName)
			return fmt.Errorf("redis-server %v exited at its start: %s", r.Args, lastLines(string(log), 3))
		default:
		}
		if pid, err := serverPID(r.Addr()); err == nil {
			if pid != cmd.Process.Pid {
				r.Kill()
				return fmt.Errorf("port %d is another server's (pid %d)", r.port, pid)
			}
			return nil
		}
	}
	r.Kill()
	return fmt.Errorf("redis-server %v did not answer at %s within 10s", r.Args, r.Addr())
}

// serverPID asks the Redis (or sentinel) at addr for its process id.
func serverPID(addr string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return 0, err
	}
	rd := bufio.NewReader(conn)
	head, err := rd.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(head))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(rd, body); err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server names no process_id")
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
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

// Signal sends sig to the running server (SIGSTOP and SIGCONT freeze and
// thaw it: a server that hangs without closing its connections).
func (r *RedisServer) Signal(sig os.Signal) {
	if r.cmd != nil {
		r.cmd.Process.Signal(sig)
	}
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
