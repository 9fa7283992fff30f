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
//	POST /v1/workspaces/{id}/exec?arg=CMD&arg=ARG…[&stdin=1][&tty=ROWSxCOLS]
//
// The request body is the command's stdin when stdin=1 (full duplex: it is
// read while the output is written). The answer (200) is a stream of
// frames, each a kind byte, a big-endian uint32 length and the payload:
// 1 stdout, 2 stderr (as they come), then 3 the exit status in decimal, or
// 4 an error message. With tty the command runs on a terminal of that
// size: its output comes as stdout frames only, and the request body is
// frames too (0 stdin, 5 a new size "ROWSxCOLS"), so a resized window
// reaches the command. Audited as workspace.exec (the command itself is
// not recorded: it may hold secrets).
const (
	frameStdin  = 0
	frameStdout = 1
	frameStderr = 2
	frameExit   = 3
	frameError  = 4
	frameResize = 5
)

// writeFrame writes one frame to w.
func writeFrame(w io.Writer, kind byte, p []byte) error {
	var head [5]byte
	head[0] = kind
	binary.BigEndian.PutUint32(head[1:], uint32(len(p)))
	if _, err := w.Write(head[:]); err != nil {
		return err
	}
	_, err := w.Write(p)
	return err
}

// readFrame reads one frame of at most limit bytes from br.
func readFrame(br *bufio.Reader, limit uint32) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n > limit {
		return 0, nil, fmt.Errorf("exec: a %d-byte frame (limit %d)", n, limit)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		return 0, nil, err
	}
	return head[0], p, nil
}

// parseWinSize parses "ROWSxCOLS".
func parseWinSize(s string) (provider.WinSize, error) {
	var ws provider.WinSize
	if _, err := fmt.Sscanf(s, "%dx%d", &ws.Rows, &ws.Cols); err != nil || ws.Rows == 0 || ws.Cols == 0 {
		return ws, fmt.Errorf("%w: terminal size %q, want ROWSxCOLS", ErrBadInput, s)
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
		kind, p, err := readFrame(br, 1<<20)
		if err != nil {
			return
		}
		switch kind {
		case frameStdin:
			if _, err := stdin.Write(p); err != nil {
				return
			}
		case frameResize:
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
}

func (f *frames) write(kind byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := writeFrame(f.w, kind, p); err != nil {
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
	spec := provider.ExecSpec{ID: ws.ID, Argv: argv, Env: ws.Env}
	if a.cfg.Storage != nil {
		spec.VolumeDir = a.cfg.Storage.VolumePath(ws.ID)
	}
	rc := http.NewResponseController(w)
	stdin, err := execInput(r, rc, &spec)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/vnd.gantry.exec")
	w.WriteHeader(http.StatusOK)
	f := &frames{w: w, rc: rc}
	status, err := ex.Exec(r.Context(), spec, stdin, frameWriter{f, frameStdout}, frameWriter{f, frameStderr})
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

// ExecError is a command that could not run in the workspace (not its
// exit status: that is Exec's int).
type ExecError struct{ Message string }

func (e *ExecError) Error() string { return "exec: " + e.Message }

// ExecIO is where an exec's input comes from and its output goes.
type ExecIO struct {
	Stdin          io.Reader // nil: none
	Stdout, Stderr io.Writer
	// TTY, if set, runs the command on a terminal of TTY.Size, resized
	// to each size sent on TTY.Resize; its output all comes on Stdout.
	TTY *provider.TTY
}

// errExecReturned ends the request body of an Exec that returned.
var errExecReturned = errors.New("exec: returned")

// Exec runs argv in workspace id, copying stdin to it and its output as it
// comes, and returns its exit status. It returns as soon as the server
// refuses the request or ctx ends, whatever stdin does: a Read of stdin
// that is under way then ends in a goroutine, and what it read is dropped.
func (c *Client) Exec(ctx context.Context, id string, argv []string, eio ExecIO) (int, error) {
	q := url.Values{"arg": argv}
	if eio.Stdin != nil {
		q.Set("stdin", "1")
	}
	var body io.Reader
	if eio.Stdin != nil || eio.TTY != nil {
		// The request body is a pipe of Exec's own, closed when Exec
		// returns or ctx ends: net/http gives up on a request only after
		// the body's Read under way returns, and one of stdin may never.
		pr, pw := io.Pipe()
		defer pr.Close() // what writes to pw stops
		defer pw.CloseWithError(errExecReturned)
		defer context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })()
		body = pr
		if t := eio.TTY; t != nil {
			size := t.Size
			if size.Rows == 0 || size.Cols == 0 {
				size = provider.DefaultWinSize
			}
			q.Set("tty", fmt.Sprintf("%dx%d", size.Rows, size.Cols))
			tctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go terminalOutput(tctx, pw, eio.Stdin, t.Resize)
		} else {
			go func() {
				_, err := io.Copy(pw, eio.Stdin)
				pw.CloseWithError(err) // nil: the body ends
			}()
		}
	}
	resp, err := c.send(ctx, "POST", "/v1/workspaces/"+url.PathEscape(id)+"/exec?"+q.Encode(), "application/octet-stream", body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return readFrames(bufio.NewReader(resp.Body), eio.Stdout, eio.Stderr)
}

// terminalOutput frames stdin (nil: none) and resizes into the request
// body of a tty exec; the body ends with stdin, or with ctx.
func terminalOutput(ctx context.Context, pw *io.PipeWriter, stdin io.Reader, resize <-chan provider.WinSize) {
	var mu sync.Mutex
	send := func(kind byte, p []byte) error {
		mu.Lock()
		defer mu.Unlock()
		return writeFrame(pw, kind, p)
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case s, ok := <-resize:
				if !ok {
					return
				}
				if send(frameResize, fmt.Appendf(nil, "%dx%d", s.Rows, s.Cols)) != nil {
					return
				}
			case <-stop:
				return
			}
		}
	}()
	defer close(stop)
	if stdin == nil {
		<-ctx.Done()
		pw.Close()
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := stdin.Read(buf)
		if n > 0 && send(frameStdin, buf[:n]) != nil {
			return
		}
		if err != nil {
			pw.Close()
			return
		}
	}
}

// readFrames copies output frames until the exit or error frame.
func readFrames(br *bufio.Reader, stdout, stderr io.Writer) (int, error) {
	for {
		kind, payload, err := readFrame(br, 1<<30)
		if err != nil {
			return 0, fmt.Errorf("exec: the stream ended before the command's status: %w", err)
		}
		switch kind {
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
