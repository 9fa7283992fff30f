// Package process is a provider.Container that runs a workspace's command
// as a detached process (its own session) with the volume directory as
// working directory and HOME. A pidfile holding "pid starttime port uid"
// under RunDir identifies the process, so a restarted server finds running
// workspaces again and a recycled pid is never mistaken for one. The
// command gets PORT, a port it may serve HTTP on; Endpoint tells the
// server's proxy where that is, and Dial connects to it.
//
// When the server runs as root, each workspace runs as a user of its own,
// in mount and network namespaces of its own, with a minimal environment
// (contain.go says what that keeps out); otherwise as the server's user.
//
// The files: process.go (this one) Container, Start, Observe, Stop, Dial;
// logs.go the command's output (Logs, capped at DefaultLogCap); exec.go
// Exec, a command in the workspace; limits.go the memory and pids limits it
// enforces (CheckLimits); contain.go what contains a workspace (Isolation,
// Network, SafePath, the volume's owner); uids.go the workspaces' users
// (IDRange, DefaultUIDs, the allocation table); ns.go the namespaces
// (isolate, enter, dialIn); kill.go ending every process of a workspace.
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

	"golang.org/x/sys/unix"

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

	// Containment, when the server runs as root (contain.go). UIDs is the
	// range workspaces' users come from, one each (zero = DefaultUIDs),
	// recorded in the host-wide UIDTable (zero = DefaultUIDTable; uids.go);
	// Network is what they reach (zero = NetworkPrivate: nothing but their
	// own loopback); SharedUser runs them as the server's own user instead,
	// uncontained (ws serve --insecure-shared-user).
	UIDs       IDRange
	UIDTable   string
	Network    Network
	SharedUser bool

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
	_ provider.Discarder    = (*Container)(nil)
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

// record is a pidfile's content: "pid start port uid". uid is -1 for a
// command run as the server's own user (and in a pidfile of an earlier
// release, which has no uid; port is 0 in one older still).
type record struct {
	pid   int
	start uint64
	port  int
	uid   int
}

// read reads id's pidfile: exists if there is one, running if its process
// still runs.
func (c *Container) read(id string) (rec record, exists, running bool, err error) {
	pf, err := c.pidfile(id)
	if err != nil {
		return rec, false, false, err
	}
	b, err := os.ReadFile(pf)
	if errors.Is(err, os.ErrNotExist) {
		return rec, false, false, nil
	}
	if err != nil {
		return rec, false, false, err
	}
	rec.uid = -1
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return rec, true, false, nil // a torn or foreign pidfile: not ours
	}
	rec.pid, err = strconv.Atoi(f[0])
	if err != nil {
		return rec, true, false, nil
	}
	if rec.start, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return rec, true, false, nil
	}
	if len(f) >= 3 {
		rec.port, _ = strconv.Atoi(f[2])
	}
	if len(f) >= 4 {
		if rec.uid, err = strconv.Atoi(f[3]); err != nil {
			rec.uid = -1
		}
	}
	got, ok := procStart(rec.pid)
	return rec, true, ok && got == rec.start, nil
}

// alive reads the pidfile and reports the pid if that process still runs.
func (c *Container) alive(id string) (pid int, exists bool, running bool, err error) {
	rec, exists, running, err := c.read(id)
	return rec.pid, exists, running, err
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

// Start runs spec.Command detached unless it already runs: contained as
// the workspace's own user when the server runs as root (contain.go).
func (c *Container) Start(ctx context.Context, spec provider.Spec) error {
	if _, _, running, err := c.alive(spec.ID); err != nil || running {
		return err
	}
	pf, _ := c.pidfile(spec.ID)
	limits, err := c.startable(spec)
	if err != nil {
		return err
	}
	command := spec.Command
	if command == "" {
		command = DefaultCommand
	}
	port, err := freePort()
	if err != nil {
		return fmt.Errorf("process: start %s: %w", spec.ID, err)
	}
	uid, err := c.prepare(ctx, spec)
	if err != nil {
		return fmt.Errorf("process: start %s: %w", spec.ID, err)
	}
	logPath := filepath.Join(c.RunDir, spec.ID+".log")
	c.rotate(logPath)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	logf.Chmod(0o600) // one an earlier release made is 0644
	cmd := exec.Command("/bin/sh", "-c", limitPrefix(limits)+command)
	cmd.Dir = spec.VolumeDir
	cmd.Env = workspaceEnv(spec.ID, spec.VolumeDir, port, spec.Env, "GANTRY_WORKSPACE_NAME="+spec.Name)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: credential(uid)}
	var hook func() error
	if uid >= 0 {
		hook = isolate(spec.VolumeDir, c.Network, uid)
	}
	if err := spawn(startCmd(cmd), hook); err != nil {
		return fmt.Errorf("process: start %s: %w", spec.ID, err)
	}
	rec := record{pid: cmd.Process.Pid, port: port, uid: uid}
	ended := c.reap(spec.ID, cmd)
	start, ok := procStart(rec.pid)
	if !ok {
		return c.endedAtOnce(ctx, spec.ID, ended, logf.Name())
	}
	rec.start = start
	if err := fsutil.WriteFileAtomic(pf, []byte(fmt.Sprintf("%d %d %d %d\n", rec.pid, rec.start, rec.port, rec.uid)), 0o600); err != nil {
		syscall.Kill(-rec.pid, syscall.SIGKILL)
		return err
	}
	if !spec.HTTP {
		return nil
	}
	return c.waitServing(ctx, spec.ID, rec, ended, logf.Name())
}

// startable refuses a start that cannot be, and returns spec's limits
// with the defaults filled in.
func (c *Container) startable(spec provider.Spec) (provider.Limits, error) {
	limits := c.withDefaults(spec.Limits)
	if fi, err := os.Stat(spec.VolumeDir); err != nil || !fi.IsDir() {
		return limits, fmt.Errorf("process: start %s: volume %s is not a directory: %v", spec.ID, spec.VolumeDir, err)
	}
	if err := c.Check(); err != nil {
		return limits, provider.Permanent("BadConfig", err)
	}
	if err := c.CheckLimits(limits); err != nil {
		return limits, provider.Permanent("LimitUnsupported", fmt.Errorf("process: start %s: %w", spec.ID, err))
	}
	return limits, c.mkRunDir()
}

// prepare readies a contained start: the workspace's uid (allocated, or
// the one it holds), no process of that uid left from before (an exec'd
// one that outlived a crashed server), and the volume the uid's. It
// returns -1 (and does nothing) when workspaces share the server's user.
func (c *Container) prepare(ctx context.Context, spec provider.Spec) (int, error) {
	if !c.contained() {
		return -1, nil
	}
	uid, err := c.allocateUID(spec.ID, spec.VolumeDir)
	if err != nil {
		return -1, err
	}
	if err := killUID(ctx, uid); err != nil {
		return -1, err
	}
	return uid, claimVolume(spec.VolumeDir, uid)
}

// waitServing polls until the command accepts a connection on its PORT
// (from where the server's proxy dials it) or ends.
func (c *Container) waitServing(ctx context.Context, id string, rec record, ended chan struct{}, logName string) error {
	var last error
	for {
		conn, err := c.dial(ctx, rec)
		if err == nil {
			conn.Close()
			return nil
		}
		last = err
		select {
		case <-ended:
			return c.endedAtOnce(ctx, id, ended, logName)
		case <-ctx.Done():
			return fmt.Errorf("provider: workspace %s: its command serves no HTTP on its PORT (%v): %w", id, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
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
	fsutil.WriteFileAtomic(path, []byte(fmt.Sprintf("%d %d %s\n", ps.ExitCode(), time.Now().UnixMilli(), status)), 0o600)
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

// Endpoint is the address of the running workspace's PORT: 127.0.0.1 in
// its own network namespace when it has one, so reach it through Dial.
func (c *Container) Endpoint(_ context.Context, id string) (string, error) {
	rec, err := c.runningRecord(id)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(rec.port)), nil
}

// runningRecord is the pidfile of a running workspace with a PORT.
func (c *Container) runningRecord(id string) (record, error) {
	rec, _, running, err := c.read(id)
	if err != nil {
		return rec, err
	}
	if !running {
		return rec, fmt.Errorf("%w: workspace %s is not running", provider.ErrNotRunning, id)
	}
	if rec.port <= 0 {
		return rec, fmt.Errorf("%w: workspace %s was started without a PORT (by an earlier release): restart it", provider.ErrNotRunning, id)
	}
	return rec, nil
}

// Dial connects to the running workspace's port (0: its PORT) on its
// loopback, from inside its network namespace (the server's proxy uses
// it: the host cannot reach those ports).
func (c *Container) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	rec, err := c.runningRecord(id)
	if err != nil {
		return nil, err
	}
	if port != 0 {
		rec.port = port
	}
	return c.dial(ctx, rec)
}

func (c *Container) dial(ctx context.Context, rec record) (net.Conn, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(rec.port))
	ns, same, err := nsFD(rec, "net")
	if err != nil {
		return nil, err
	}
	if same {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	defer unix.Close(ns)
	return dialIn(ctx, ns, addr)
}

// Stop sends SIGTERM to the command's process group (and, contained, to
// every process of the workspace's uid), gives the command StopGrace to
// end (then SIGKILL), and then ends every process of the workspace with
// SIGKILL: those the command left in the background and those `ws exec`
// started, in whatever session or group (kill.go).
func (c *Container) Stop(ctx context.Context, id string) error {
	defer c.forgetExit(id) // a stop is not a crash
	defer c.waitReaped(id)
	rec, exists, running, err := c.read(id)
	if err != nil || !exists {
		return err
	}
	byUID := rec.uid >= 0 && os.Geteuid() == 0
	if running {
		syscall.Kill(-rec.pid, syscall.SIGTERM)
		if byUID {
			signalUID(rec.uid, syscall.SIGTERM)
		}
		if err := c.awaitEnd(ctx, id); err != nil {
			return err
		}
	}
	if byUID {
		return killUID(ctx, rec.uid)
	}
	return killMarked(ctx, id)
}

// Discard removes what RunDir keeps of deleted workspace id: its output
// log (and its rotated part), pid and exit files (provider.Discarder). The workspace is stopped
// first (Stop), so no command writes them meanwhile.
func (c *Container) Discard(_ context.Context, id string) error {
	if _, err := c.pidfile(id); err != nil {
		return err
	}
	// Under capLog's lock: a rotation in progress finishes first, and one
	// after finds no log to copy back into .log.1.
	logMu.Lock()
	defer logMu.Unlock()
	for _, ext := range []string{".log", ".log.1", ".pid", ".exit"} {
		if err := os.Remove(filepath.Join(c.RunDir, id+ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("process: discard %s: %w", id, err)
		}
	}
	return nil
}

// awaitEnd waits for id's command to end; past StopGrace it sends SIGKILL
// to its process group every round.
func (c *Container) awaitEnd(ctx context.Context, id string) error {
	grace := c.StopGrace
	if grace == 0 {
		grace = 5 * time.Second
	}
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
