package docker

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/workspace/provider"
)

var _ provider.Execer = (*Provider)(nil)

// Exec runs spec.Argv in the workspace's running container (its working
// directory and environment, plus PORT), streaming its output and, with
// stdin, feeding it; it returns the command's exit status. The engine
// reports a command killed by signal N as 128+N.
func (p *Provider) Exec(ctx context.Context, spec provider.ExecSpec, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if len(spec.Argv) == 0 {
		return 0, errors.New("docker: exec: no command")
	}
	if !p.running(ctx, spec.ID) {
		return 0, fmt.Errorf("%w: workspace %s", provider.ErrNotRunning, spec.ID)
	}
	created, err := p.cli.ExecCreate(ctx, ContainerName(spec.ID), client.ExecCreateOptions{Cmd: spec.Argv,
		AttachStdin: stdin != nil, AttachStdout: true, AttachStderr: true, WorkingDir: p.cfg.MountPath})
	if err != nil {
		return 0, p.wrap("exec in", spec.ID, err)
	}
	att, err := p.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return 0, p.wrap("attach to exec in", spec.ID, err)
	}
	defer att.Close()
	if stdin != nil {
		go func() {
			io.Copy(att.Conn, stdin)
			att.CloseWrite()
		}()
	}
	if _, err := stdcopy.StdCopy(stdout, stderr, att.Reader); err != nil && ctx.Err() == nil {
		return 0, p.wrap("exec output of", spec.ID, err)
	}
	in, err := p.cli.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
	if err != nil {
		return 0, p.wrap("inspect exec in", spec.ID, err)
	}
	return in.ExitCode, nil
}

// running reports whether the workspace's container runs.
func (p *Provider) running(ctx context.Context, id string) bool {
	in, err := p.cli.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	return err == nil && in.Container.State != nil && in.Container.State.Running
}
