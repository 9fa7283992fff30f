package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/gantryhq/gantry/workspace/provider"
)

var _ provider.Execer = (*Container)(nil)

// ExitNotFound is Exec's status for a command not found in the workspace's
// $PATH (a shell's 127).
const ExitNotFound = 127

// Exec runs argv in the running workspace's volume as its command runs:
// as the same user, in the same namespaces, with its environment (PATH,
// HOME, GANTRY_WORKSPACE_ID and _NAME, PORT, the spec's env; argv[0] is
// looked up in that PATH: not found, it exits ExitNotFound) and umask 077,
// in its own process group (its own session on a terminal with spec.TTY),
// which ctx's end kills. What it leaves running in the background ends
// with the workspace (Stop).
func (c *Container) Exec(ctx context.Context, spec provider.ExecSpec, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	id, argv, vol := spec.ID, spec.Argv, spec.VolumeDir
	if len(argv) == 0 {
		return 0, errors.New("process: exec: no command")
	}
	rec, err := c.runningRecord(id)
	if err != nil {
		return 0, err
	}
	env := workspaceEnv(id, vol, rec.port, spec.Env, "GANTRY_WORKSPACE_NAME="+spec.Name)
	if spec.TTY != nil {
		env = append(env, "TERM="+termName())
	}
	path, err := lookPath(argv[0], env)
	if err != nil {
		// As a shell answers a command it cannot find: 127, said on stderr.
		w := stderr
		if w == nil {
			w = stdout // a terminal has stdout alone
		}
		if w != nil {
			fmt.Fprintf(w, "gantry: %v\n", err)
		}
		return ExitNotFound, nil
	}
	hook, done, err := enter(rec)
	if err != nil {
		return 0, err
	}
	defer done()
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir, cmd.Env = vol, env
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := func() error { return spawn(startCmd(cmd), hook) }
	if spec.TTY != nil {
		err = runOnTerminal(cmd, spec.TTY, stdin, stdout, rec.uid, start)
	} else {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: credential(rec.uid)}
		if err = start(); err == nil {
			err = cmd.Wait()
		}
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, fmt.Errorf("process: exec in %s: %w", id, err)
}

// termName is the TERM an exec terminal gets: the server's own, or xterm.
func termName() string {
	if t := os.Getenv("TERM"); t != "" && t != "dumb" {
		return t
	}
	return "xterm-256color"
}

// runOnTerminal runs cmd (as uid, -1: the server's user; started by
// start) as the leader of a new session whose controlling terminal is a
// fresh pty, uid's: stdin is typed into it (its end as ^D), what the
// terminal shows is copied to out, and resizes are applied as they come.
// It returns cmd's end once the terminal's output is drained (or, if a
// background process keeps the terminal open, shortly after).
func runOnTerminal(cmd *exec.Cmd, t *provider.TTY, stdin io.Reader, out io.Writer, uid int, start func() error) error {
	size := t.Size
	if size.Rows == 0 || size.Cols == 0 {
		size = provider.DefaultWinSize
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		return err
	}
	err = pty.Setsize(ptmx, &pty.Winsize{Rows: size.Rows, Cols: size.Cols})
	if err == nil && uid >= 0 {
		err = tty.Chown(uid, uid)
	}
	if err == nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Credential: credential(uid)}
		err = start()
	}
	tty.Close()
	if err != nil {
		ptmx.Close()
		return err
	}
	defer ptmx.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s, ok := <-t.Resize:
				if !ok {
					return
				}
				pty.Setsize(ptmx, &pty.Winsize{Rows: s.Rows, Cols: s.Cols})
			case <-done:
				return
			}
		}
	}()
	if stdin != nil {
		go func() {
			io.Copy(ptmx, stdin)
			ptmx.Write([]byte{4}) // the terminal's EOF: a reading shell or cat ends
		}()
	}
	drained := make(chan struct{})
	go func() {
		io.Copy(out, ptmx) // ends with EIO once no process holds the terminal
		close(drained)
	}()
	err = cmd.Wait()
	select {
	case <-drained:
	case <-time.After(500 * time.Millisecond):
		ptmx.SetReadDeadline(time.Now())
		<-drained
	}
	return err
}
