package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/gantryhq/gantry/workspace/provider"
)

var (
	_ provider.Endpointer   = (*Provider)(nil)
	_ provider.LogReader    = (*Provider)(nil)
	_ provider.ExitReporter = (*Provider)(nil)
	_ provider.Execer       = (*Provider)(nil)
)

// running is the workspace's Pod if it runs.
func (p *Provider) running(id string) (*corev1.Pod, error) {
	pod, err := p.w.pod(PodName(id))
	if err != nil {
		return nil, wrap("observe", id, err)
	}
	if pod == nil || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return nil, fmt.Errorf("%w: workspace %s", provider.ErrNotRunning, id)
	}
	return pod, nil
}

// Endpoint is the running Pod's IP at ContainerPort (reachable where the
// server runs on the cluster's Pod network).
func (p *Provider) Endpoint(_ context.Context, id string) (string, error) {
	pod, err := p.running(id)
	if err != nil {
		return "", err
	}
	if pod.Status.PodIP == "" {
		return "", fmt.Errorf("%w: workspace %s: its pod has no IP yet", provider.ErrNotRunning, id)
	}
	return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(ContainerPort)), nil
}

// Exited reports how the workspace's Pod ended, if it ended at or after
// since (a Pod that ended is not restarted: restart policy Never).
func (p *Provider) Exited(ctx context.Context, id string, since time.Time) (*provider.Exit, error) {
	pod, err := p.w.pod(PodName(id))
	if err != nil {
		return nil, wrap("observe", id, err)
	}
	if pod == nil || !podEnded(pod) {
		return nil, nil
	}
	e := podExit(pod)
	if e.At.Before(since) {
		return nil, nil
	}
	if e.Output == "" {
		var b bytes.Buffer
		if p.copyLogs(ctx, pod.Name, 20, false, &b) == nil {
			e.Output = b.String()
		}
	}
	return &e, nil
}

// Logs copies the workspace container's output through the API server:
// the last tail lines, then with follow what comes next, across restarts
// (a new Pod of the same name), until ctx ends.
func (p *Provider) Logs(ctx context.Context, id string, tail int, follow bool, w io.Writer) error {
	name := PodName(id)
	for {
		err := p.copyLogs(ctx, name, tail, follow, w)
		if ctx.Err() != nil {
			return nil
		}
		if !follow {
			return wrap("read logs of", id, err)
		}
		// The Pod ended or is not there: wait for the next one.
		tail = 0
		select {
		case <-ctx.Done():
			return nil
		case <-p.w.next(name):
		case <-time.After(5 * time.Second): // poll: a safety net under the watch
		}
	}
}

func (p *Provider) copyLogs(ctx context.Context, name string, tail int, follow bool, w io.Writer) error {
	opts := &corev1.PodLogOptions{Container: "workspace", Follow: follow}
	if tail > 0 {
		t := int64(tail)
		opts.TailLines = &t
	}
	rc, err := p.cli.CoreV1().Pods(p.cfg.Namespace).GetLogs(name, opts).Stream(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}

// Exec runs spec.Argv in the workspace's container through the API
// server's exec subresource (WebSocket, falling back to SPDY) and returns
// its exit status.
func (p *Provider) Exec(ctx context.Context, spec provider.ExecSpec, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if len(spec.Argv) == 0 {
		return 0, errors.New("kubernetes: exec: no command")
	}
	if _, err := p.running(spec.ID); err != nil {
		return 0, err
	}
	opts := &corev1.PodExecOptions{Container: "workspace", Command: spec.Argv, Stdin: stdin != nil, Stdout: true, Stderr: spec.TTY == nil, TTY: spec.TTY != nil}
	req := p.cli.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.cfg.Namespace).Name(PodName(spec.ID)).
		SubResource("exec").VersionedParams(opts, scheme.ParameterCodec)
	ex, err := p.executor(req.URL())
	if err != nil {
		return 0, err
	}
	so := remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Tty: opts.TTY}
	if spec.TTY != nil {
		so.TerminalSizeQueue = newSizeQueue(ctx, spec.TTY)
	} else {
		so.Stderr = stderr
	}
	err = ex.StreamWithContext(ctx, so)
	var ce utilexec.CodeExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ce):
		return ce.Code, nil
	}
	return 0, wrap("exec in", spec.ID, err)
}

// executor speaks the exec protocol: WebSocket first, SPDY where the API
// server (or a proxy) does not upgrade to it.
func (p *Provider) executor(u *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(p.rest, "GET", u.String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(p.rest, "POST", u)
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// sizeQueue hands the terminal's sizes to the exec stream.
type sizeQueue struct {
	ctx   context.Context
	first *remotecommand.TerminalSize
	ch    <-chan provider.WinSize
}

func newSizeQueue(ctx context.Context, t *provider.TTY) *sizeQueue {
	ws := t.Size
	if ws.Rows == 0 || ws.Cols == 0 {
		ws = provider.DefaultWinSize
	}
	return &sizeQueue{ctx: ctx, first: &remotecommand.TerminalSize{Width: ws.Cols, Height: ws.Rows}, ch: t.Resize}
}

// Next returns the next size; nil ends the queue.
func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	if f := q.first; f != nil {
		q.first = nil
		return f
	}
	select {
	case <-q.ctx.Done():
		return nil
	case ws, ok := <-q.ch:
		if !ok {
			return nil
		}
		return &remotecommand.TerminalSize{Width: ws.Cols, Height: ws.Rows}
	}
}
