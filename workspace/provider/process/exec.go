package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/gantryhq/gantry/workspace/provider"
)

var _ provider.Execer = (*Container)(nil)

// Exec runs argv in the running workspace's volume with its environment
// (HOME, GANTRY_WORKSPACE_ID, PORT, the spec's env) in its own process
// group (its own session on a terminal with spec.TTY), which ctx's end
// kills.
func (c *Container) Exec(ctx context.Context, spec provider.ExecSpec, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	id, argv, vol := spec.ID, spec.Argv, spec.VolumeDir
	if len(argv) == 0 {
		return 0, errors.New("process: exec: no command")
	}
	addr, err := c.Endpoint(ctx, id)
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = vol
	cmd.Env = append(append(os.Environ(), "HOME="+vol, "GANTRY_WORKSPACE_ID="+id, "PORT="+addr[strings.LastIndexByte(addr, ':')+1:]),
		spec.Env...)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if spec.TTY != nil {
		cmd.Env = append(cmd.Env, "TERM="+termName())
		err = runOnTerminal(cmd, spec.TTY, stdin, stdout)
	} else {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err = cmd.Run()
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

// runOnTerminal runs cmd as the leader of a new session whose controlling
// terminal is a fresh pty: stdin is typed into it (its end as ^D), what
// the terminal shows is copied to out, and resizes are applied as they
// come. It returns cmd's end once the terminal's output is drained (or,
// if a background process keeps the terminal open, shortly after).
func runOnTerminal(cmd *exec.Cmd, t *provider.TTY, stdin io.Reader, out io.Writer) error {
	size := t.Size
	if size.Rows == 0 || size.Cols == 0 {
		size = provider.DefaultWinSize
	}
	ptmx, err := pty.StartWithAttrs(cmd, &pty.Winsize{Rows: size.Rows, Cols: size.Cols}, &syscall.SysProcAttr{Setsid: true, Setctty: true})
	if err != nil {
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
