package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/workspace/provider"
)

var _ provider.Execer = (*Provider)(nil)

// Exec runs spec.Argv in the workspace's running container (its working
// directory and environment, plus PORT, then spec.Env: the workspace's own
// variables, which the container has already, and those its caller adds,
// such as an SSH session's LANG), streaming its output and, with stdin,
// feeding it; it returns the command's exit status. The engine reports a
// command killed by signal N as 128+N.
func (p *Provider) Exec(ctx context.Context, spec provider.ExecSpec, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if len(spec.Argv) == 0 {
		return 0, errors.New("docker: exec: no command")
	}
	if !p.running(ctx, spec.ID) {
		return 0, fmt.Errorf("%w: workspace %s", provider.ErrNotRunning, spec.ID)
	}
	opts := client.ExecCreateOptions{Cmd: spec.Argv,
		AttachStdin: stdin != nil, AttachStdout: true, AttachStderr: true, WorkingDir: p.cfg.MountPath,
		Env: slices.Clone(spec.Env)}
	var size client.ConsoleSize
	if spec.TTY != nil {
		ws := spec.TTY.Size
		if ws.Rows == 0 || ws.Cols == 0 {
			ws = provider.DefaultWinSize
		}
		size = client.ConsoleSize{Height: uint(ws.Rows), Width: uint(ws.Cols)}
		opts.TTY, opts.ConsoleSize, opts.Env = true, size, append(opts.Env, "TERM=xterm-256color")
	}
	created, err := p.cli.ExecCreate(ctx, ContainerName(spec.ID), opts)
	if err != nil {
		return 0, p.wrap("exec in", spec.ID, err)
	}
	att, err := p.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{TTY: opts.TTY, ConsoleSize: size})
	if err != nil {
		return 0, p.wrap("attach to exec in", spec.ID, err)
	}
	defer att.Close()
	if stdin != nil {
		go func() {
			io.Copy(att.Conn, stdin)
			if opts.TTY {
				// The terminal's EOF, as the process provider sends it; the
				// stream stays open (closing it ends a terminal's output).
				att.Conn.Write([]byte{4})
				return
			}
			att.CloseWrite()
		}()
	}
	if opts.TTY {
		done := make(chan struct{})
		defer close(done)
		// Engines before API 1.42 ignore the size given at the start;
		// they get it right after (a shell reads it again on SIGWINCH).
		p.cli.ExecResize(ctx, created.ID, client.ExecResizeOptions(size))
		go p.resizeExec(ctx, created.ID, spec.TTY.Resize, done)
		_, err = io.Copy(stdout, att.Reader) // a terminal's output is one raw stream
	} else {
		_, err = stdcopy.StdCopy(stdout, stderr, att.Reader)
	}
	if err != nil && ctx.Err() == nil {
		return 0, p.wrap("exec output of", spec.ID, err)
	}
	in, err := p.cli.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
	if err != nil {
		return 0, p.wrap("inspect exec in", spec.ID, err)
	}
	return in.ExitCode, nil
}

// resizeExec applies each size from sizes to the exec's terminal until done.
func (p *Provider) resizeExec(ctx context.Context, execID string, sizes <-chan provider.WinSize, done <-chan struct{}) {
	for {
		select {
		case s, ok := <-sizes:
			if !ok {
				return
			}
			p.cli.ExecResize(ctx, execID, client.ExecResizeOptions{Height: uint(s.Rows), Width: uint(s.Cols)})
		case <-done:
			return
		}
	}
}

// running reports whether the workspace's container runs.
func (p *Provider) running(ctx context.Context, id string) bool {
	in, err := p.cli.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	return err == nil && in.Container.State != nil && in.Container.State.Running
}
