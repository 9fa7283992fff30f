package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// dialServer dials the server whatever the host asked for (every
// *.localhost is loopback to a browser; Go's resolver is not asked).
func (e *env) dialServer(ctx context.Context, network, _ string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, e.addr)
}

// login walks the app's login as a browser does: GET the app → authorize
// (a login form: no page session) → POST the token to /v1/session with
// the form's next → authorize again → the app's callback (its cookie) →
// the app. It keeps the host-only gantry_app cookie.
func (e *env) login() error {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Transport: &http.Transport{DialContext: e.dialServer}, Timeout: 10 * time.Second}
	resp, err := c.Get(e.url + "/")
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Request.URL.Path, "/v1/apps/authorize") {
		return fmt.Errorf("GET %s/ without a session: %s at %s, want the login form of authorize", e.url, resp.Status, resp.Request.URL)
	}
	form := url.Values{"token": {e.alice}, "next": {resp.Request.URL.RequestURI()}}
	session := resp.Request.URL.ResolveReference(&url.URL{Path: "/v1/session"})
	return waitFor(30*time.Second, "the app to answer after login", func() error {
		resp, err := c.PostForm(session.String(), form)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != upstreamBody {
			return fmt.Errorf("login ended at %s: %s %q", resp.Request.URL, resp.Status, b)
		}
		app, _ := url.Parse(e.url + "/")
		for _, ck := range jar.Cookies(app) {
			if ck.Name == "gantry_app" {
				e.cookie = ck.Name + "=" + ck.Value
				return nil
			}
		}
		return errors.New("no gantry_app cookie for the app host after login")
	})
}

// target is one way to GET the app's /.
type target struct {
	name   string
	url    string
	header http.Header
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	cold   *http.Client // a new connection per request
	warm   *http.Client // one kept-alive connection
}

func newTarget(name, u string, h http.Header, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *target {
	return &target{name: name, url: u, header: h, dial: dial,
		cold: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}},
		warm: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 1}}}
}

// ttfb GETs t's url with c: the time from the call to the response's
// first byte; it fails unless the app's body comes back.
func (t *target) ttfb(c *http.Client) (time.Duration, error) {
	var first time.Time
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { first = time.Now() }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", t.url, nil)
	if err != nil {
		return 0, err
	}
	for k, v := range t.header {
		req.Header[k] = v
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", t.name, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(b) != upstreamBody {
		return 0, fmt.Errorf("%s: GET %s: %s %q %v", t.name, t.url, resp.Status, b, err)
	}
	return first.Sub(t0), nil
}

// targets are the app URL (the cookie), /w/{id}/ (a bearer token) and,
// as root, the app's port dialed inside the workspace's network namespace.
func (e *env) targets() ([]*target, error) {
	ts := []*target{
		newTarget("app URL", e.url+"/", http.Header{"Cookie": {e.cookie}}, e.dialServer),
		newTarget("/w/{id}/ + bearer", e.base+"/w/"+e.id+"/", http.Header{"Authorization": {"Bearer " + e.alice}}, e.dialServer),
	}
	direct, err := e.directDial()
	if err != nil {
		log.Printf("no direct baseline (the app's port inside the workspace's network namespace): %v", err)
		return ts, nil
	}
	return append(ts, newTarget("direct to the app's port", "http://127.0.0.1:"+e.upstreamPort+"/", nil, direct)), nil
}

// directDial dials the app's port from inside the workspace's network
// namespace (as the process provider does), or fails when that is not
// possible (not root: the workspace shares the host's network, so the
// port is dialed as it is).
func (e *env) directDial() (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	port, err := e.appPort()
	if err != nil {
		return nil, err
	}
	e.upstreamPort = port
	pid, err := pidOf(filepath.Join(e.data, "run", e.id+".pid"))
	if err != nil {
		return nil, err
	}
	nsPath := fmt.Sprintf("/proc/%d/ns/net", pid)
	if self, err := readlink("/proc/self/ns/net"); err != nil {
		return nil, err
	} else if ws, err := readlink(nsPath); err != nil {
		return nil, err
	} else if self == ws {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}, nil
	}
	ns, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return dialIn(ctx, ns, addr) }, nil
}

// appPort is the workspace's $PORT, as its app tells it.
func (e *env) appPort() (string, error) {
	t := newTarget("port", e.url+"/port", http.Header{"Cookie": {e.cookie}}, e.dialServer)
	resp, err := t.cold.Do(&http.Request{Method: "GET", URL: mustParse(t.url), Header: t.header})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /port: %s %v", resp.Status, err)
	}
	return string(b), nil
}

func mustParse(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func readlink(p string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Readlink(p, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// dialIn dials addr with the thread inside network namespace ns and
// returns the thread to ours (the process provider's dialIn, in short).
func dialIn(ctx context.Context, ns int, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer unix.Close(self)
	if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if serr := unix.Setns(self, unix.CLONE_NEWNET); serr != nil {
		// The thread stays locked, so it dies with its goroutine.
		if conn != nil {
			conn.Close()
		}
		return nil, serr
	}
	runtime.UnlockOSThread()
	return conn, err
}

// benchHTTP measures each target's time to first byte, cold and warm,
// interleaved, n samples each.
func (e *env) benchHTTP(res *results) error {
	ts, err := e.targets()
	if err != nil {
		return err
	}
	fmt.Printf("time to first byte of GET / (%d bytes), %d samples each, interleaved:\n", len(upstreamBody), e.cfg.n)
	cold := make([][]time.Duration, len(ts))
	warm := make([][]time.Duration, len(ts))
	for _, t := range ts { // open the warm connections
		if _, err := t.ttfb(t.warm); err != nil {
			return err
		}
	}
	cpu0 := cpuOf(e.serve.Process.Pid)
	for range e.cfg.n {
		for i, t := range ts {
			d, err := t.ttfb(t.cold)
			if err != nil {
				return err
			}
			cold[i] = append(cold[i], d)
			if d, err = t.ttfb(t.warm); err != nil {
				return err
			}
			warm[i] = append(warm[i], d)
		}
	}
	cpu := cpuOf(e.serve.Process.Pid) - cpu0
	for i, t := range ts {
		res.addLatencies(t.name+" cold", cold[i])
		res.addLatencies(t.name+" warm", warm[i])
	}
	through := 2 * 2 * e.cfg.n // the app URL's and /w/{id}/'s, cold and warm
	fmt.Printf("  server CPU: %v over the %d requests through it (%v a request)\n", cpu, through, cpu/time.Duration(through))
	return nil
}
