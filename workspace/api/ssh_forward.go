package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/crypto/ssh"
)

// Port forwarding (ssh -L): a "direct-tcpip" channel to 127.0.0.1,
// localhost or ::1 at the workspace's PORT or a port one of its apps
// declares (Spec.Apps) is connected to that port as
// the proxy connects to it (upstream.go): through the provider's
// PortDialer when it has one (a workspace in its own network namespace),
// else to the provider's Endpoint. Another host or port is refused: the
// API server's network is not the client's to reach. A forwarded
// connection is part of the SSH connection, which is TTL activity while
// open (streams.go).

// directTCPIP serves one "direct-tcpip" channel request.
func (s *sshServer) directTCPIP(ctx context.Context, nc ssh.NewChannel) {
	var m struct {
		Host     string
		Port     uint32
		OrigHost string
		OrigPort uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &m); err != nil {
		nc.Reject(ssh.ConnectionFailed, "bad direct-tcpip request")
		return
	}
	conn, err := s.forward(ctx, m.Host, m.Port)
	if err != nil {
		s.log("workspace: ssh port forwarding", "to", net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port))), "err", err)
		nc.Reject(ssh.Prohibited, err.Error())
		return
	}
	defer conn.Close()
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-ctx.Done(); conn.Close(); ch.Close() }()
	splice(ch, conn)
}

// errForward is a refused forwarding's cause.
var errForward = errors.New("ssh -L reaches only the workspace's PORT and its apps' ports on localhost")

// forward connects to host:port in the workspace: its PORT or an app's.
func (s *sshServer) forward(ctx context.Context, host string, port uint32) (net.Conn, error) {
	if host != "127.0.0.1" && host != "localhost" && host != "::1" {
		return nil, fmt.Errorf("%w: not host %q", errForward, host)
	}
	if s.ep == nil {
		return nil, fmt.Errorf("%w: this server's provider serves no workspace ports", errForward)
	}
	addr, err := s.ep.Endpoint(ctx, s.spec.ID)
	if err != nil {
		return nil, err
	}
	_, p, _ := net.SplitHostPort(addr)
	if p != strconv.FormatUint(uint64(port), 10) && !slices.Contains(s.ports, int(port)) {
		return nil, fmt.Errorf("%w: port %d is neither its PORT (%s) nor an app's %v", errForward, port, p, s.ports)
	}
	if s.dial != nil {
		return s.dial.Dial(ctx, s.spec.ID, int(port))
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", withPort(addr, int(port)))
}

// splice copies between ch and conn both ways; each side's end is passed
// on as a half close, and it returns when both directions have ended.
func splice(ch ssh.Channel, conn net.Conn) {
	var wg sync.WaitGroup
	wg.Go(func() {
		io.Copy(conn, ch)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			conn.Close()
		}
	})
	io.Copy(ch, conn)
	ch.CloseWrite()
	wg.Wait()
}
