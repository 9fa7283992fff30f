package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/workspace/provider"
)

// PortDialer is a Container that connects to a running workspace's ports
// itself: the process provider as root, whose workspaces each have a
// network namespace of their own, where Endpoint's 127.0.0.1:PORT is
// not the host's. The proxy then dials through it: port is the one to
// reach (an app's), 0 its PORT.
type PortDialer interface {
	Dial(ctx context.Context, id string, port int) (net.Conn, error)
}

// withPort is addr (host:port) with port port, or addr if port is 0.
func withPort(addr string, port int) string {
	host, _, err := net.SplitHostPort(addr)
	if port == 0 || err != nil {
		return addr
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// dialHostSuffix ends the made-up host name the proxy puts in a request's
// URL for a PortDialer's workspace: "<id>.workspace.invalid:<port>". Its
// transport's connection pool is keyed by it, so a kept-alive connection
// goes back only to the workspace and port it was made for; its dialer
// reads both back. (The Host header stays the workspace's own
// 127.0.0.1:port.)
const dialHostSuffix = ".workspace.invalid"

// upstream is where the proxy sends a request for workspace id whose
// Endpoint is addr: the URL host, and the transport (nil: the default one).
// dial is the API's transport through its Container's PortDialer, nil if it
// has none (newDialTransport, made once in NewAPI).
func upstream(dial http.RoundTripper, id, addr string) (host string, rt http.RoundTripper) {
	if dial == nil {
		return addr, nil
	}
	_, port, _ := net.SplitHostPort(addr)
	return net.JoinHostPort(id+dialHostSuffix, port), dial
}

// newDialTransport is the transport through c's PortDialer, or nil if c
// dials no workspace itself.
func newDialTransport(c provider.Container) http.RoundTripper {
	if d, ok := c.(PortDialer); ok {
		return dialTransport(d)
	}
	return nil
}

// dialTransport is a transport that reaches a workspace through d.
func dialTransport(d PortDialer) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, p, err := net.SplitHostPort(addr)
			id, ok := strings.CutSuffix(host, dialHostSuffix)
			port, perr := strconv.Atoi(p)
			if err != nil || perr != nil || !ok || id == "" {
				return nil, fmt.Errorf("workspace proxy: %q is no workspace's address", addr)
			}
			return d.Dial(ctx, id, port)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
}
