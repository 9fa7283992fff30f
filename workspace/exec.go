package workspace

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/provider"
)

// Exec over the API (`gantry ws exec`):
//
//	POST /v1/workspaces/{id}/exec?arg=CMD&arg=ARG…[&stdin=1]
//
// The request body is the command's stdin when stdin=1 (full duplex: it is
// read while the output is written). The answer (200) is a stream of
// frames, each a kind byte, a big-endian uint32 length and the payload:
// 1 stdout, 2 stderr (as they come), then 3 the exit status in decimal, or
// 4 an error message. Audited as workspace.exec (the command itself is not
// recorded: it may hold secrets).
const (
	frameStdout = 1
	frameStderr = 2
	frameExit   = 3
	frameError  = 4
)

// frames writes frames to an HTTP response, flushing each.
type frames struct {
	mu sync.Mutex
	w  io.Writer
	rc *http.ResponseController
}

func (f *frames) write(kind byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var head [5]byte
	head[0] = kind
	binary.BigEndian.PutUint32(head[1:], uint32(len(p)))
	if _, err := f.w.Write(head[:]); err != nil {
		return err
	}
	if _, err := f.w.Write(p); err != nil {
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
		a.fail(w, r, fmt.Errorf("%w: this server's provider cannot run commands in workspaces", ErrBadInput))
		return
	}
	argv := r.URL.Query()["arg"]
	if len(argv) == 0 || argv[0] == "" {
		a.fail(w, r, fmt.Errorf("%w: exec needs a command (arg=…)", ErrBadInput))
		return
	}
	if ws.ObservedStatus != Running {
		a.fail(w, r, fmt.Errorf("%w: workspace %s is %s, not RUNNING: bring it up first", ErrConflict, ws.ID, ws.ObservedStatus))
		return
	}
	rc := http.NewResponseController(w)
	var stdin io.Reader
	if r.URL.Query().Get("stdin") == "1" {
		if err := rc.EnableFullDuplex(); err != nil {
			a.fail(w, r, fmt.Errorf("exec: stdin: %w", err))
			return
		}
		stdin = r.Body
	}
	rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/vnd.gantry.exec")
	w.WriteHeader(http.StatusOK)
	f := &frames{w: w, rc: rc}
	var dir string
	if a.cfg.Storage != nil {
		dir = a.cfg.Storage.VolumePath(ws.ID)
	}
	status, err := ex.Exec(r.Context(), provider.ExecSpec{ID: ws.ID, VolumeDir: dir, Argv: argv}, stdin, frameWriter{f, frameStdout}, frameWriter{f, frameStderr})
	if err != nil {
		noteDetail(r, err.Error())
		f.write(frameError, []byte(err.Error()))
		return
	}
	if p, _ := auth.FromContext(r.Context()); status != 0 {
		noteDetail(r, fmt.Sprintf("%s (owner %s) ran %q: status %d", p.TokenID, p.Owner, argv[0], status))
	}
	f.write(frameExit, []byte(strconv.Itoa(status)))
}

// ExecError is a command that could not run in the workspace (not its
// exit status: that is Exec's int).
type ExecError struct{ Message string }

func (e *ExecError) Error() string { return "exec: " + e.Message }

// Exec runs argv in workspace id, copying stdin (nil: none) to it and its
// output to stdout and stderr as it comes, and returns its exit status.
func (c *Client) Exec(ctx context.Context, id string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	q := url.Values{"arg": argv}
	if stdin != nil {
		q.Set("stdin", "1")
	}
	resp, err := c.send(ctx, "POST", "/v1/workspaces/"+url.PathEscape(id)+"/exec?"+q.Encode(), "application/octet-stream", stdin)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return readFrames(bufio.NewReader(resp.Body), stdout, stderr)
}

// readFrames copies output frames until the exit or error frame.
func readFrames(br *bufio.Reader, stdout, stderr io.Writer) (int, error) {
	var head [5]byte
	for {
		if _, err := io.ReadFull(br, head[:]); err != nil {
			return 0, fmt.Errorf("exec: the stream ended before the command's status: %w", err)
		}
		payload := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(br, payload); err != nil {
			return 0, fmt.Errorf("exec: %w", err)
		}
		switch head[0] {
		case frameStdout:
			stdout.Write(payload)
		case frameStderr:
			stderr.Write(payload)
		case frameExit:
			return strconv.Atoi(string(payload))
		case frameError:
			return 0, &ExecError{Message: string(payload)}
		default:
			return 0, errors.New("exec: unknown frame")
		}
	}
}
