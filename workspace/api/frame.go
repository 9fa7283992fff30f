package api

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
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
// The frame kinds.
const (
	FrameStdin  = 0
	FrameStdout = 1
	FrameStderr = 2
	FrameExit   = 3
	FrameError  = 4
	FrameResize = 5
)

// WriteFrame writes one frame to w.
func WriteFrame(w io.Writer, kind byte, p []byte) error {
	var head [5]byte
	head[0] = kind
	binary.BigEndian.PutUint32(head[1:], uint32(len(p)))
	if _, err := w.Write(head[:]); err != nil {
		return err
	}
	_, err := w.Write(p)
	return err
}

// ReadFrame reads one frame of at most limit bytes from br.
func ReadFrame(br *bufio.Reader, limit uint32) (byte, []byte, error) {
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
