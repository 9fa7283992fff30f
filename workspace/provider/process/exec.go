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

	"github.com/gantryhq/gantry/workspace/provider"
)

var _ provider.Execer = (*Container)(nil)

// Exec runs argv in the running workspace's volume with its environment
// (HOME, GANTRY_WORKSPACE_ID, PORT) in its own process group, which ctx's
// end kills.
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
	cmd.Env = append(os.Environ(), "HOME="+vol, "GANTRY_WORKSPACE_ID="+id, "PORT="+addr[strings.LastIndexByte(addr, ':')+1:])
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Run()
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
