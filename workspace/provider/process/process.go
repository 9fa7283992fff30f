// Package process is a provider.Container that runs a workspace's command
// as a detached process (its own session) with the volume directory as
// working directory and HOME. A pidfile holding "pid starttime port" under
// RunDir identifies the process, so a restarted server finds running
// workspaces again and a recycled pid is never mistaken for one. The
// command gets PORT, a free loopback port it may serve HTTP on; Endpoint
// tells the server's proxy where that is.
//
// The files: process.go (this one) Container, Start, Observe, Stop;
// logs.go the command's output (Logs, capped at DefaultLogCap); exec.go
// Exec, a command in the workspace's directory; limits.go the memory and
// pids limits it enforces (CheckLimits).
package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/workspace/provider"
)

// DefaultCommand runs when a workspace has none.
const DefaultCommand = "exec sleep infinity"

// Container runs workspaces as processes.
type Container struct {
	// RunDir holds <id>.pid, <id>.log and <id>.exit.
	RunDir string
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL; 0 = 5 s.
	StopGrace time.Duration
	// LogCap bounds <id>.log: past it the log is rotated (to <id>.log.1);
	// 0 = DefaultLogCap. LogCheck is how often a running command's log is
	// checked against it; 0 = 1 s.
	LogCap   int64
	LogCheck time.Duration
	// Defaults are the limits of workspaces that set none (limits.go says
	// which are enforced and how).
	Defaults provider.Limits

	// OnExit, if set, is called (on its own goroutine) when a command this
	// server started ends, after its end is recorded: the server hints its
	// monitor, so a crash is observed at once, not at the next pass.
	OnExit func(id string)
}

var _ provider.ChangeNotifier = (*Container)(nil)

// OnChange makes f the OnExit hook unless one is set already
// (provider.ChangeNotifier).
func (c *Container) OnChange(f func(id string)) {
	if c.OnExit == nil {
		c.OnExit = f
	}
}

// reapers maps <RunDir>/<id> of a command this process started to a
// channel closed once its end is recorded (<id>.exit): Stop waits for it,
// so nothing is written under RunDir after Stop returns, whichever
// Container value (sharing the RunDir) started the command.
var reapers sync.Map

var (
	_ provider.Container    = (*Container)(nil)
	_ provider.Endpointer   = (*Container)(nil)
	_ provider.ExitReporter = (*Container)(nil)
)

// ErrBadID is returned for ids that are not plain names.
var ErrBadID = errors.New("process: bad workspace id")

func (c *Container) pidfile(id string) (string, error) {
	if id == "" || strings.ContainsAny(id, `/\`) || strings.HasPrefix(id, ".") {
		return "", fmt.Errorf("%w: %q", ErrBadID, id)
	}
	return filepath.Join(c.RunDir, id+".pid"), nil
}

// procStart returns the process's start time (clock ticks since boot) and
// whether it is alive (not a zombie).
func procStart(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	return st, err == nil
}

// alive reads the pidfile and reports the pid if that process still runs.
func (c *Container) alive(id string) (pid int, exists bool, running bool, err error) {
	pf, err := c.pidfile(id)
	if err != nil {
		return 0, false, false, err
	}
	b, err := os.ReadFile(pf)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, false, nil
	}
	if err != nil {
		return 0, false, false, err
	}
	var start uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil {
		return 0, true, false, nil // a torn or foreign pidfile: not ours
	}
	got, ok := procStart(pid)
	return pid, true, ok && got == start, nil
}

// Observe reports Running, Stopped (pidfile, no process) or Missing.
func (c *Container) Observe(_ context.Context, id string) (provider.ContainerState, error) {
	_, exists, running, err := c.alive(id)
	switch {
	case err != nil:
		return provider.Missing, err
	case running:
		c.capLog(id) // a command started by an earlier server has no reaper watching its log
		return provider.Running, nil
	case exists:
		return provider.Stopped, nil
	}
	return provider.Missing, nil
}

// Start runs spec.Command detached unless it already runs.
func (c *Container) Start(ctx context.Context, spec provider.Spec) error {
	if _, _, running, err := c.alive(spec.ID); err != nil || running {
		return err
	}
	pf, _ := c.pidfile(spec.ID)
	if fi, err := os.Stat(spec.VolumeDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("process: start %s: volume %s is not a directory: %v", spec.ID, spec.VolumeDir, err)
	}
	if err := os.MkdirAll(c.RunDir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(c.RunDir, spec.ID+".log")
	c.rotate(logPath)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	command := spec.Command
	if command == "" {
		command = DefaultCommand
	}
	limits := c.withDefaults(spec.Limits)
	if err := c.CheckLimits(limits); err != nil {
		return provider.Permanent("LimitUnsupported", fmt.Errorf("process: start %s: %w", spec.ID, err))
	}
	command = limitPrefix(limits) + command
	port, err := freePort()
	if err != nil {
		return fmt.Errorf("process: start %s: %w", spec.ID, err)
	}
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Dir = spec.VolumeDir
	cmd.Env = append(append(os.Environ(), "HOME="+spec.VolumeDir, "GANTRY_WORKSPACE_ID="+spec.ID, "GANTRY_WORKSPACE_NAME="+spec.Name,
		"PORT="+strconv.Itoa(port)), spec.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("process: start %s: %w", spec.ID, err)
	}
	pid := cmd.Process.Pid
	ended := c.reap(spec.ID, cmd)
	start, ok := procStart(pid)
	if !ok {
		return c.endedAtOnce(ctx, spec.ID, ended, logf.Name())
	}
	if err := fsutil.WriteFileAtomic(pf, []byte(fmt.Sprintf("%d %d %d\n", pid, start, port)), 0o644); err != nil {
		syscall.Kill(-pid, syscall.SIGKILL)
		return err
	}
	if !spec.HTTP {
		return nil
	}
	return provider.WaitServing(ctx, spec.ID, func(context.Context) (string, error) {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
	}, func(ctx context.Context) error {
		select {
		case <-ended:
			return c.endedAtOnce(ctx, spec.ID, ended, logf.Name())
		default:
			return nil
		}
	})
}

// reap waits for cmd (while this server lives; after a restart, init
// reaps), records how it ended in <id>.exit and calls OnExit; the channel
// closes once the end is recorded.
func (c *Container) reap(id string, cmd *exec.Cmd) chan struct{} {
	exitPath := filepath.Join(c.RunDir, id+".exit")
	os.Remove(exitPath) // an earlier run's end is not this one's
	ended := make(chan struct{})
	key := filepath.Join(c.RunDir, id)
	reapers.Store(key, ended)
	go c.watchLog(id, ended)
	go func() {
		defer close(ended)
		cmd.Wait()
		c.recordExit(exitPath, cmd.ProcessState)
		reapers.CompareAndDelete(key, ended)
		if c.OnExit != nil {
			c.OnExit(id)
		}
	}()
	return ended
}

// watchLog keeps id's log under its cap until ended closes.
func (c *Container) watchLog(id string, ended chan struct{}) {
	every := c.LogCheck
	if every <= 0 {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			c.capLog(id)
		case <-ended:
			return
		}
	}
}

// endedAtOnce is Start's error for a command gone before its pidfile was
// written: how it ended (an ExitError) once the reaper has recorded it.
func (c *Container) endedAtOnce(ctx context.Context, id string, ended chan struct{}, logName string) error {
	select {
	case <-ended:
	case <-time.After(time.Second):
	}
	if e, _ := c.Exited(ctx, id, time.Time{}); e != nil {
		return fmt.Errorf("process: start %s: %w", id, &provider.ExitError{Exit: *e})
	}
	return fmt.Errorf("process: start %s: command exited at once (see %s)", id, logName)
}

// waitReaped waits (a little) for the reaper of id's command to record its
// end, if this server started it.
func (c *Container) waitReaped(id string) {
	if ch, ok := reapers.Load(filepath.Join(c.RunDir, id)); ok {
		select {
		case <-ch.(chan struct{}):
		case <-time.After(2 * time.Second):
		}
	}
}

// forgetExit removes id's end record.
func (c *Container) forgetExit(id string) {
	if pf, err := c.pidfile(id); err == nil {
		os.Remove(strings.TrimSuffix(pf, ".pid") + ".exit")
	}
}

// recordExit writes how the command ended to <id>.exit: "code unixms status".
func (c *Container) recordExit(path string, ps *os.ProcessState) {
	if ps == nil {
		return
	}
	status := fmt.Sprintf("exit %d", ps.ExitCode())
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		status = "signal " + ws.Signal().String()
	}
	fsutil.WriteFileAtomic(path, []byte(fmt.Sprintf("%d %d %s\n", ps.ExitCode(), time.Now().UnixMilli(), status)), 0o644)
}

// Exited reports the command's end recorded at or after since, with its
// last 20 lines of output; nil while it runs or if it did not end since.
// (A command that ends while no server reaps it leaves no record.)
func (c *Container) Exited(_ context.Context, id string, since time.Time) (*provider.Exit, error) {
	pf, err := c.pidfile(id)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(strings.TrimSuffix(pf, ".pid") + ".exit")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var code int
	var at int64
	f := strings.SplitN(strings.TrimSpace(string(b)), " ", 3)
	if len(f) < 3 {
		return nil, nil
	}
	code, _ = strconv.Atoi(f[0])
	at, _ = strconv.ParseInt(f[1], 10, 64)
	e := &provider.Exit{Code: code, At: time.UnixMilli(at), Status: f[2]}
	if e.At.Before(since.Truncate(time.Millisecond)) {
		return nil, nil
	}
	var out strings.Builder
	c.Logs(context.Background(), id, 20, false, &out)
	e.Output = out.String()
	return e, nil
}

// freePort picks a free port on 127.0.0.1 for the command's PORT.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Endpoint is the loopback address of the running workspace's PORT.
func (c *Container) Endpoint(_ context.Context, id string) (string, error) {
	pf, err := c.pidfile(id)
	if err != nil {
		return "", err
	}
	_, _, running, err := c.alive(id)
	if err != nil {
		return "", err
	}
	if !running {
		return "", fmt.Errorf("%w: workspace %s is not running", provider.ErrNotRunning, id)
	}
	b, err := os.ReadFile(pf)
	if err != nil {
		return "", err
	}
	var pid, port int
	var start uint64
	if n, _ := fmt.Sscanf(string(b), "%d %d %d", &pid, &start, &port); n < 3 || port <= 0 {
		return "", fmt.Errorf("%w: workspace %s was started without a PORT (by an earlier release): restart it", provider.ErrNotRunning, id)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// Stop sends SIGTERM to the process group, then SIGKILL after StopGrace.
func (c *Container) Stop(ctx context.Context, id string) error {
	defer c.forgetExit(id) // a stop is not a crash
	defer c.waitReaped(id)
	pid, _, running, err := c.alive(id)
	if err != nil || !running {
		return err
	}
	grace := c.StopGrace
	if grace == 0 {
		grace = 5 * time.Second
	}
	syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for {
		cur, _, running, _ := c.alive(id)
		if !running {
			return nil
		}
		if time.Now().After(deadline) {
			// Every round, to the process the pidfile names now.
			syscall.Kill(-cur, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
