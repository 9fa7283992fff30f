package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"github.com/moby/moby/client/pkg/versions"

	"github.com/gantryhq/gantry/workspace/provider"
)

var _ provider.Execer = (*Provider)(nil)

// Exec runs spec.Argv in the workspace's running container (its working
// directory and environment, plus PORT, then spec.Env: the workspace's own
// variables, which the container has already, and those its caller adds,
// such as an SSH session's LANG), streaming its output and, with stdin,
// feeding it; it returns the command's exit status. The engine reports a
// command killed by signal N as 128+N. When ctx ends, Exec returns (the
// connection to the engine is closed; the command is left to end on its
// own: the end of its stdin, or the container's).
func (p *Provider) Exec(ctx context.Context, spec provider.ExecSpec, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if len(spec.Argv) == 0 {
		return 0, errors.New("docker: exec: no command")
	}
	if !p.running(ctx, spec.ID) {
		return 0, fmt.Errorf("%w: workspace %s", provider.ErrNotRunning, spec.ID)
	}
	opts, size, gate := p.execOptions(ctx, spec, stdin != nil)
	created, err := p.cli.ExecCreate(ctx, ContainerName(spec.ID), opts)
	if err != nil {
		return 0, p.wrap("exec in", spec.ID, err)
	}
	att, err := p.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{TTY: opts.TTY, ConsoleSize: size})
	if err != nil {
		return 0, p.wrap("attach to exec in", spec.ID, err)
	}
	defer att.Close()
	// The hijacked connection outlives ctx unless closed.
	defer context.AfterFunc(ctx, att.Close)()
	if opts.TTY {
		done := make(chan struct{})
		defer close(done)
		p.cli.ExecResize(ctx, created.ID, client.ExecResizeOptions(size))
		if gate {
			att.Conn.Write([]byte("\n")) // sized: the command may start
			stdout = &dropEcho{w: stdout, echo: []byte("\r\n")}
		}
		go p.resizeExec(ctx, created.ID, spec.TTY.Resize, done)
	}
	if stdin != nil {
		go feedExec(att.HijackedResponse, stdin, opts.TTY)
	}
	return p.finishExec(ctx, spec.ID, created.ID, att.Reader, opts.TTY, stdout, stderr)
}

// execOptions are the exec's options for spec (with stdin attached or
// not), its terminal's size, and whether it waits for it (needsSizeGate).
func (p *Provider) execOptions(ctx context.Context, spec provider.ExecSpec, stdin bool) (opts client.ExecCreateOptions, size client.ConsoleSize, gate bool) {
	opts = client.ExecCreateOptions{Cmd: spec.Argv,
		AttachStdin: stdin, AttachStdout: true, AttachStderr: true, WorkingDir: p.cfg.MountPath,
		Env: slices.Clone(spec.Env)}
	if spec.TTY == nil {
		return opts, size, false
	}
	ws := spec.TTY.Size
	if ws.Rows == 0 || ws.Cols == 0 {
		ws = provider.DefaultWinSize
	}
	size = client.ConsoleSize{Height: uint(ws.Rows), Width: uint(ws.Cols)}
	opts.TTY, opts.ConsoleSize, opts.Env = true, size, append(opts.Env, "TERM=xterm-256color")
	if gate = p.needsSizeGate(ctx, spec.ID); gate {
		opts.Cmd, opts.AttachStdin = append([]string{"/bin/sh", "-c", sizeGate, "sh"}, spec.Argv...), true
	}
	return opts, size, gate
}

// finishExec copies the exec's output until it ends (or ctx does) and
// returns its exit status.
func (p *Provider) finishExec(ctx context.Context, id, execID string, out io.Reader, tty bool, stdout, stderr io.Writer) (int, error) {
	var err error
	if tty {
		_, err = io.Copy(stdout, out) // a terminal's output is one raw stream
	} else {
		_, err = stdcopy.StdCopy(stdout, stderr, out)
	}
	if ctx.Err() != nil {
		return 0, p.wrap("exec in", id, context.Cause(ctx))
	}
	if err != nil {
		return 0, p.wrap("exec output of", id, err)
	}
	in, err := p.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{})
	if err != nil {
		return 0, p.wrap("inspect exec in", id, err)
	}
	return in.ExitCode, nil
}

// feedExec copies stdin to the exec, then passes its end on: a half
// close of the connection (the command reads EOF), or on a terminal the
// terminal's EOF character, as the process provider sends it (the stream
// stays open: closing it ends a terminal's output).
func feedExec(att client.HijackedResponse, stdin io.Reader, tty bool) {
	io.Copy(att.Conn, stdin)
	if tty {
		att.Conn.Write([]byte{4})
		return
	}
	att.CloseWrite()
}

// sizeGate holds a command on a terminal until a line comes (needsSizeGate).
const sizeGate = `read -r _ && exec "$@"`

// needsSizeGate reports whether a command on a terminal in workspace id
// waits, in the image's sh, for its terminal's size. Engines before API
// 1.42 start an exec's terminal at 0x0 and take its size only once it
// runs: too late for a command that reads it at once (`stty size`, an
// editor's first screen, a prompt). There Exec runs the command through
// sh (sizeGate), sets the size, then sends the line that lets it start,
// and takes the line's echo out of the output. An image without /bin/sh
// gets the race.
func (p *Provider) needsSizeGate(ctx context.Context, id string) bool {
	if !versions.LessThan(p.cli.ClientVersion(), "1.42") {
		return false
	}
	_, err := p.cli.ContainerStatPath(ctx, ContainerName(id), client.ContainerStatPathOptions{Path: "/bin/sh"})
	return err == nil
}

// dropEcho passes writes on to w but for the first bytes, while they are
// echo's.
type dropEcho struct {
	w    io.Writer
	echo []byte
}

func (d *dropEcho) Write(b []byte) (int, error) {
	n := len(b)
	for len(d.echo) > 0 && len(b) > 0 {
		if b[0] != d.echo[0] {
			d.echo = nil
			break
		}
		b, d.echo = b[1:], d.echo[1:]
	}
	if len(b) == 0 {
		return n, nil
	}
	_, err := d.w.Write(b)
	return n, err
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
