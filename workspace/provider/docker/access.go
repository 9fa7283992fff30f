package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/workspace/provider"
)

// ContainerPort is the PORT a workspace's command is given in its
// container; the proxy reaches it on the container's network address.
const ContainerPort = 8080

var (
	_ provider.Endpointer   = (*Provider)(nil)
	_ provider.LogReader    = (*Provider)(nil)
	_ provider.ExitReporter = (*Provider)(nil)
)

// Endpoint is the running container's address on its network, at
// ContainerPort.
func (p *Provider) Endpoint(ctx context.Context, id string) (string, error) {
	in, err := p.cli.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) || err == nil && (in.Container.State == nil || !in.Container.State.Running) {
		return "", fmt.Errorf("%w: workspace %s", provider.ErrNotRunning, id)
	}
	if err != nil {
		return "", p.wrap("inspect", id, err)
	}
	if ns := in.Container.NetworkSettings; ns != nil {
		for _, name := range slices.Sorted(maps.Keys(ns.Networks)) {
			if ep := ns.Networks[name]; ep != nil && ep.IPAddress.IsValid() {
				return net.JoinHostPort(ep.IPAddress.String(), strconv.Itoa(ContainerPort)), nil
			}
		}
	}
	return "", fmt.Errorf("%w: workspace %s has no network address (network mode %q)", provider.ErrNotRunning, id, p.cfg.NetworkMode)
}

// Logs copies the container's output: the last tail lines, then with
// follow what comes next, across restarts (a new container of the same
// name), until ctx ends. A removed container's output is gone with it.
func (p *Provider) Logs(ctx context.Context, id string, tail int, follow bool, w io.Writer) error {
	t := "all"
	if tail > 0 {
		t = strconv.Itoa(tail)
	}
	since := ""
	for {
		rc, err := p.cli.ContainerLogs(ctx, ContainerName(id), client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true,
			Follow: follow, Tail: t, Since: since})
		switch {
		case cerrdefs.IsNotFound(err) && !follow:
			return fmt.Errorf("%w: workspace %s has no container", provider.ErrNotFound, id)
		case err != nil && !cerrdefs.IsNotFound(err):
			return p.wrap("logs of", id, err)
		case err == nil:
			_, cerr := stdcopy.StdCopy(w, w, rc)
			rc.Close()
			if !follow {
				return cerr
			}
			if ctx.Err() != nil {
				return nil
			}
		}
		// Followed to the container's end: wait for the next one.
		t, since = "all", strconv.FormatInt(time.Now().Unix(), 10)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Exited reports how the workspace's container ended, if it ended at or
// after since: its exit code (OOM kills named) and its last 20 lines.
func (p *Provider) Exited(ctx context.Context, id string, since time.Time) (*provider.Exit, error) {
	in, err := p.cli.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, p.wrap("inspect", id, err)
	}
	st := in.Container.State
	if st == nil || st.Running || (st.Status != container.StateExited && st.Status != container.StateDead) {
		return nil, nil
	}
	finished, _ := time.Parse(time.RFC3339Nano, st.FinishedAt)
	if finished.Before(since) {
		return nil, nil
	}
	return p.exit(ctx, id, st, finished), nil
}

// exit describes a container that ended.
func (p *Provider) exit(ctx context.Context, id string, st *container.State, at time.Time) *provider.Exit {
	e := &provider.Exit{Code: st.ExitCode, At: at, Status: fmt.Sprintf("exit %d", st.ExitCode)}
	if st.OOMKilled || st.ExitCode == 137 && p.cfg.Memory > 0 && p.oomKilledLate(ctx, id) {
		e.Status += ", OOMKilled"
	}
	var out bytes.Buffer
	p.Logs(ctx, id, 20, false, &out)
	e.Output = out.String()
	return e
}

// oomKilledLate re-reads a SIGKILLed container's state for up to a second:
// the engine can record OOMKilled just after it reports the exit.
func (p *Provider) oomKilledLate(ctx context.Context, id string) bool {
	for range 10 {
		in, err := p.cli.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
		if err != nil || in.Container.State == nil {
			return false
		}
		if in.Container.State.OOMKilled {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}
