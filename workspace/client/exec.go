package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"sync"

	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/provider"
)

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
		return api.WriteFrame(pw, kind, p)
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case s, ok := <-resize:
				if !ok {
					return
				}
				if send(api.FrameResize, fmt.Appendf(nil, "%dx%d", s.Rows, s.Cols)) != nil {
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
		if n > 0 && send(api.FrameStdin, buf[:n]) != nil {
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
		kind, payload, err := api.ReadFrame(br, 1<<30)
		if err != nil {
			return 0, fmt.Errorf("exec: the stream ended before the command's status: %w", err)
		}
		switch kind {
		case api.FrameStdout:
			stdout.Write(payload)
		case api.FrameStderr:
			stderr.Write(payload)
		case api.FrameExit:
			return strconv.Atoi(string(payload))
		case api.FrameError:
			return 0, &ExecError{Message: string(payload)}
		default:
			return 0, errors.New("exec: unknown frame")
		}
	}
}
