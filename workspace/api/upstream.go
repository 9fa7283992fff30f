package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace/provider"
)

// PortDialer is a Container that connects to a running workspace's PORT
// itself: the process provider as root, whose workspaces each have a
// network namespace of their own, where Endpoint's 127.0.0.1:PORT is
// not the host's. The proxy then dials through it.
type PortDialer interface {
	Dial(ctx context.Context, id string) (net.Conn, error)
}

// dialHostSuffix ends the made-up host name the proxy puts in a request's
// URL for a PortDialer's workspace: "<id>.workspace.invalid:<port>". Its
// transport's connection pool is keyed by it, so a kept-alive connection
// goes back only to the workspace it was made for; its dialer reads the
// id back. (The Host header stays the workspace's own 127.0.0.1:PORT.)
const dialHostSuffix = ".workspace.invalid"

// dialTransports holds one transport per PortDialer (built at its first
// proxied request and kept: an API's Container does not change).
var dialTransports sync.Map

// upstream is where the proxy sends a request for workspace id whose
// Endpoint is addr: the URL host, and the transport (nil: the default one).
func upstream(c provider.Container, id, addr string) (host string, rt http.RoundTripper) {
	d, ok := c.(PortDialer)
	if !ok {
		return addr, nil
	}
	_, port, _ := net.SplitHostPort(addr)
	host = net.JoinHostPort(id+dialHostSuffix, port)
	if t := reflect.TypeOf(d); !t.Comparable() {
		return host, dialTransport(d, true) // not a map key: a transport per request, without keep-alive
	}
	if rt, ok := dialTransports.Load(d); ok {
		return host, rt.(http.RoundTripper)
	}
	v, _ := dialTransports.LoadOrStore(d, dialTransport(d, false))
	return host, v.(http.RoundTripper)
}

// dialTransport is a transport that reaches a workspace through d.
func dialTransport(d PortDialer, once bool) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			id, ok := strings.CutSuffix(host, dialHostSuffix)
			if err != nil || !ok || id == "" {
				return nil, fmt.Errorf("workspace proxy: %q is no workspace's address", addr)
			}
			return d.Dial(ctx, id)
		},
		DisableKeepAlives:   once,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
}
