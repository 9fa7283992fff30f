package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/provider"
)

// parseWinSize parses "ROWSxCOLS".
func parseWinSize(s string) (provider.WinSize, error) {
	var ws provider.WinSize
	if _, err := fmt.Sscanf(s, "%dx%d", &ws.Rows, &ws.Cols); err != nil || ws.Rows == 0 || ws.Cols == 0 {
		return ws, fmt.Errorf("%w: terminal size %q, want ROWSxCOLS", workspace.ErrBadInput, s)
	}
	return ws, nil
}

// terminalInput reads a tty exec's request body: stdin frames go to stdin
// (closed at the body's end), sizes to resize (the latest kept when the
// command is slow to take them).
func terminalInput(body io.Reader, stdin *io.PipeWriter, resize chan provider.WinSize) {
	defer stdin.Close()
	br := bufio.NewReader(body)
	for {
		kind, p, err := ReadFrame(br, 1<<20)
		if err != nil {
			return
		}
		switch kind {
		case FrameStdin:
			if _, err := stdin.Write(p); err != nil {
				return
			}
		case FrameResize:
			if ws, err := parseWinSize(string(p)); err == nil {
				select {
				case <-resize:
				default:
				}
				resize <- ws
			}
		}
	}
}

// frames writes frames to an HTTP response, flushing each.
type frames struct {
	mu sync.Mutex
	w  io.Writer
	rc *http.ResponseController
	// firstOutput ends the exec's hold on the bulk (idempotent); nil = none.
	firstOutput func()
}

func (f *frames) write(kind byte, p []byte) error {
	if f.firstOutput != nil {
		f.firstOutput()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := WriteFrame(f.w, kind, p); err != nil {
		return err
	}
	return f.rc.Flush()
}

type frameWriter struct {
	f    *frames
	kind byte
}

func (w frameWriter) Write(p []byte) (int, error) {
	if err := w.f.write(w.kind, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (a *API) exec(w http.ResponseWriter, r *http.Request) {
	ws, err := a.lookup(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ex, ok := a.cfg.Container.(provider.Execer)
	if !ok {
		a.fail(w, r, fmt.Errorf("%w: this server's provider cannot run commands in workspaces", workspace.ErrBadInput))
		return
	}
	argv := r.URL.Query()["arg"]
	if len(argv) == 0 || argv[0] == "" {
		a.fail(w, r, fmt.Errorf("%w: exec needs a command (arg=…)", workspace.ErrBadInput))
		return
	}
	if err := notRunning(ws); err != nil {
		a.fail(w, r, err)
		return
	}
	spec := provider.ExecSpec{ID: ws.ID, Name: ws.Name, Argv: argv, Env: ws.Env}
	if a.cfg.Storage != nil {
		spec.VolumeDir = a.cfg.Storage.VolumePath(ws.ID)
	}
	rc := http.NewResponseController(w)
	stdin, err := execInput(r, rc, &spec)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	r, stop := a.stream(r, ws.ID) // streams.go: ends with the credential, is activity while open
	defer stop()
	rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/vnd.gantry.exec")
	w.WriteHeader(http.StatusOK)
	f := &frames{w: w, rc: rc}
	// Until the command shows it runs (its first output or its end, a
	// second at most), the bulk waits as for any change (package urgency):
	// starting a process is a user's work too.
	f.firstOutput = a.cfg.Gate.BeginUrgent()
	held := time.AfterFunc(time.Second, f.firstOutput)
	defer held.Stop()
	defer f.firstOutput()
	status, err := ex.Exec(r.Context(), spec, stdin, frameWriter{f, FrameStdout}, frameWriter{f, FrameStderr})
	f.firstOutput()
	if cause := context.Cause(r.Context()); errors.Is(cause, auth.ErrCredentialEnded) {
		err = cause
	}
	if err != nil {
		noteDetail(r, err.Error())
		f.write(FrameError, []byte(err.Error()))
		return
	}
	if p, _ := auth.FromContext(r.Context()); status != 0 {
		noteDetail(r, fmt.Sprintf("%s (owner %s) ran %q: status %d", p.TokenID, p.Owner, argv[0], status))
	}
	f.write(FrameExit, []byte(strconv.Itoa(status)))
}

// execInput is an exec request's stdin (nil: none) and, with tty, the
// terminal it asks for (spec.TTY), fed from the framed body.
func execInput(r *http.Request, rc *http.ResponseController, spec *provider.ExecSpec) (io.Reader, error) {
	q := r.URL.Query()
	withStdin, tty := q.Get("stdin") == "1", q.Get("tty")
	if !withStdin && tty == "" {
		return nil, nil
	}
	if err := rc.EnableFullDuplex(); err != nil {
		return nil, fmt.Errorf("exec: stdin: %w", err)
	}
	if tty == "" {
		return r.Body, nil
	}
	size, err := parseWinSize(tty)
	if err != nil {
		return nil, err
	}
	resize := make(chan provider.WinSize, 1)
	spec.TTY = &provider.TTY{Size: size, Resize: resize}
	pr, pw := io.Pipe()
	go terminalInput(r.Body, pw, resize)
	if !withStdin {
		return nil, nil
	}
	return pr, nil
}

// notRunning is the conflict of a command sent to ws when it is not
// RUNNING, or is about to restart its command in place (a claim from a
// warm pool with another env): the caller tries again, as after a create.
func notRunning(ws workspace.Workspace) error {
	switch {
	case ws.ObservedStatus != workspace.Running:
		return fmt.Errorf("%w: workspace %s is %s, not RUNNING: bring it up first", workspace.ErrConflict, ws.ID, ws.ObservedStatus)
	case ws.RestartPending:
		return fmt.Errorf("%w: workspace %s is restarting its command with its new environment: try again in a moment", workspace.ErrConflict, ws.ID)
	}
	return nil
}
