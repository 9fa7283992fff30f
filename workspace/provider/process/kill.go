package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Ending every process of a workspace. With a uid of its own, the
// workspace's processes are exactly those of that uid (no process of it can
// change its uid, and a setuid program it runs keeps it as its real uid):
// signalUID signals them all with one kill(-1) made as that uid, which the
// kernel delivers with forks held off, so no fork escapes it; whatever
// session or process group they made for themselves. Sharing the server's user,
// the processes that carry GANTRY_WORKSPACE_ID=<id> in their environment
// are the workspace's (killMarked): all it starts has it, unless a process
// clears its own environment.

// signalUID sends sig to every process whose real or saved uid is uid: a
// helper process running as uid calls kill(-1), which spares the caller.
// (Not a thread of the server's with its uid changed: the runtime may run
// any goroutine on the main thread, which it never ends, and a thread of
// the server's left with a workspace's uid is one that workspace could
// signal.)
func signalUID(uid int, sig syscall.Signal) error {
	name := map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGKILL: "KILL"}[sig]
	if name == "" {
		return fmt.Errorf("process: signalUID: signal %v", sig)
	}
	cmd := exec.Command("/bin/sh", "-c", "kill -s "+name+" -- -1")
	cmd.Dir, cmd.Env = "/", []string{"PATH=" + SafePath}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: credential(uid)}
	var ee *exec.ExitError
	if err := cmd.Run(); err != nil && !errors.As(err, &ee) { // it exits 1 when no process is left
		return fmt.Errorf("process: kill -%s -1 as uid %d: %w", name, uid, err)
	}
	return nil
}

// killUID ends every process of uid: SIGKILL, until none is left alive.
func killUID(ctx context.Context, uid int) error {
	for {
		if err := signalUID(uid, syscall.SIGKILL); err != nil {
			return err
		}
		if len(processesOf(uid)) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("process: processes of uid %d outlived SIGKILL: %v: %w", uid, processesOf(uid), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// procStatus is what /proc/<pid>/status says of a live process: its real,
// effective and saved uids; ok is false for a zombie or a process gone.
func procStatus(pid string) (uids [3]int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return uids, false
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "State:" && (f[1] == "Z" || f[1] == "X"):
			return uids, false
		case len(f) >= 4 && f[0] == "Uid:":
			for i := range uids {
				uids[i], _ = strconv.Atoi(f[1+i])
			}
			return uids, true
		}
	}
	return uids, false
}

// pids lists the numeric entries of /proc.
func pids() []string {
	d, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range d {
		if n := e.Name(); n[0] >= '0' && n[0] <= '9' {
			out = append(out, n)
		}
	}
	return out
}

// processesOf lists the live processes whose real, effective or saved uid
// is uid.
func processesOf(uid int) []int {
	var out []int
	self := os.Getpid()
	for _, p := range pids() {
		if u, ok := procStatus(p); ok && (u[0] == uid || u[1] == uid || u[2] == uid) {
			if n, _ := strconv.Atoi(p); n != self {
				out = append(out, n)
			}
		}
	}
	return out
}

// liveUIDs is the set of uids some live process runs as.
func liveUIDs() map[uint32]bool {
	live := map[uint32]bool{}
	for _, p := range pids() {
		if u, ok := procStatus(p); ok {
			for _, id := range u {
				live[uint32(id)] = true
			}
		}
	}
	return live
}

// markedProcesses lists the live processes (but this one) whose
// environment holds GANTRY_WORKSPACE_ID=id.
func markedProcesses(id string) []int {
	mark := []byte("\x00GANTRY_WORKSPACE_ID=" + id + "\x00")
	self := os.Getpid()
	var out []int
	for _, p := range pids() {
		n, _ := strconv.Atoi(p)
		env, err := os.ReadFile(filepath.Join("/proc", p, "environ"))
		if n == self || err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), mark) {
			continue
		}
		if _, ok := procStatus(p); ok {
			out = append(out, n)
		}
	}
	return out
}

// killMarked ends the processes markedProcesses finds, until two scans 10
// ms apart find none: a process in the middle of an execve can read as an
// empty environ for an instant, and one scan would miss it.
func killMarked(ctx context.Context, id string) error {
	for quiet := 0; ; {
		left := markedProcesses(id)
		if len(left) == 0 {
			if quiet++; quiet == 2 {
				return nil
			}
		} else {
			quiet = 0
		}
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			if len(left) == 0 {
				return nil // the second scan was cut short; the first found none
			}
			return fmt.Errorf("process: processes of workspace %s outlived SIGKILL: %v: %w", id, left, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
