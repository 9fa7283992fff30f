package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// streamFake is a provider whose exec and followed log run until their
// context ends, and whose workspace PORT is an Upgrade echo server.
type streamFake struct {
	provider.Container
	addr     string
	execDone chan struct{} // one value per Exec that returned
}

func (f streamFake) Endpoint(context.Context, string) (string, error) { return f.addr, nil }

func (f streamFake) Exec(ctx context.Context, _ provider.ExecSpec, stdin io.Reader, stdout, _ io.Writer) (int, error) {
	defer func() { f.execDone <- struct{}{} }()
	io.WriteString(stdout, "started\n")
	if stdin != nil { // `cat`: ends with its input
		io.Copy(io.Discard, stdin)
		return 0, nil
	}
	<-ctx.Done()
	return 137, nil // as the process provider: the command was killed
}

func (f streamFake) Logs(ctx context.Context, _ string, _ int, _ bool, w io.Writer) error {
	io.WriteString(w, "line\n")
	if fl, ok := w.(interface{ Flush() }); ok {
		fl.Flush()
	}
	<-ctx.Done()
	return nil
}

// upgradeEcho answers an Upgrade with 101 and echoes the bytes; closed
// gets a value when a connection ends.
func upgradeEcho(t *testing.T, closed chan<- struct{}) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			io.WriteString(w, "no upgrade")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { conn.Close(); closed <- struct{}{} }()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// streamEnv is the API over a streamFake with a fake clock, a workspace
// of alice's observed RUNNING, and the given re-check interval.
type streamEnv struct {
	*wstest.APIEnv
	st       *store.Store
	clk      *clock.Fake
	id       string
	execDone chan struct{}
	upClosed chan struct{}
	// ended receives the workspace id of every stream that has stopped
	// noting activity (the API's debug line "workspace: stream ended").
	ended chan string
}

// endedHandler is a slog.Handler that passes on the ids of the streams
// the API says have ended.
type endedHandler struct{ ch chan<- string }

func (h endedHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h endedHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "workspace: stream ended" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "id" {
				h.ch <- a.Value.String()
			}
			return true
		})
	}
	return nil
}
func (h endedHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h endedHandler) WithGroup(string) slog.Handler      { return h }

// waitEnded waits for the API to say that id's stream has ended.
func (e *streamEnv) waitEnded(t *testing.T, id string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-e.ended:
			if got == id {
				return
			}
		case <-timeout:
			t.Fatalf("the stream into %s did not end", id)
		}
	}
}

func newStreamEnv(t *testing.T, recheck time.Duration, ttl bool) *streamEnv {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	e := &streamEnv{st: st, clk: clock.NewFake(wstest.T0), execDone: make(chan struct{}, 16), upClosed: make(chan struct{}, 16),
		ended: make(chan string, 1024)}
	up := upgradeEcho(t, e.upClosed)
	fake := streamFake{addr: strings.TrimPrefix(up.URL, "http://"), execDone: e.execDone}
	e.APIEnv = wstest.NewAPIEnv(t, st, api.APIConfig{Clock: e.clk, Container: fake, RecheckEvery: recheck,
		Limiter: auth.NewLimiter(auth.LimiterConfig{Burst: 10_000}), Logger: slog.New(endedHandler{e.ended})})
	if !ttl {
		e.id = e.workspace(t, "w", "alice")
	}
	return e
}

func (e *streamEnv) workspace(t *testing.T, name, owner string) string {
	w, err := e.st.Create(t.Context(), workspace.NewWorkspace{Name: name, Owner: owner, Desired: workspace.Running}, e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, e.st, w.ID, map[string]any{"observed_status": "RUNNING", "observed_at": e.clk.Now()})
	return w.ID
}

// credential is what a stream is opened with, and how that credential
// ends.
type credential struct {
	header string // "Authorization: …" or "Cookie: …"
	end    func()
}

func (c credential) set(req *http.Request) {
	k, v, _ := strings.Cut(c.header, ": ")
	req.Header.Set(k, v)
}

// credentials are the three ways a credential ends: an API token revoked,
// an API token that expires (the fake clock passes its expiry), and a page
// session logged out.
func (e *streamEnv) credentials(t *testing.T) map[string]func() credential {
	token := func(expires time.Duration) (string, string) {
		tok, secret, err := auth.NewToken("alice", false, e.clk.Now(), expires)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.st.Accounts().CreateToken(t.Context(), tok); err != nil {
			t.Fatal(err)
		}
		return secret, tok.ID
	}
	return map[string]func() credential{
		"revoked": func() credential {
			secret, id := token(0)
			return credential{"Authorization: Bearer " + secret, func() { e.call(t, "Authorization: Bearer "+e.Admin, "DELETE", "/v1/tokens/"+id, 200) }}
		},
		"expired": func() credential {
			secret, _ := token(time.Hour)
			return credential{"Authorization: Bearer " + secret, func() { e.clk.Advance(2 * time.Hour) }}
		},
		"logged-out": func() credential {
			secret, _ := token(0)
			resp, err := http.Post(e.Srv.URL+"/v1/session", "application/json", strings.NewReader(`{"token":"`+secret+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			var cookie string
			for _, c := range resp.Cookies() {
				if c.Name == auth.SessionCookie {
					cookie = "Cookie: " + c.Name + "=" + c.Value
				}
			}
			if cookie == "" {
				t.Fatalf("login: %s, no session cookie", resp.Status)
			}
			return credential{cookie, func() { e.call(t, cookie, "POST", "/v1/session/logout", 204) }}
		},
	}
}

func (e *streamEnv) call(t *testing.T, header, method, path string, want int) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, e.Srv.URL+path, nil)
	credential{header: header}.set(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s %s, want %d", method, path, resp.Status, b, want)
	}
}

// openStream opens one stream kind with c; it returns once the stream is
// seen open, with a channel closed when the client sees it end.
type openStream func(t *testing.T, e *streamEnv, id string, c credential) (ended <-chan struct{})

func openExec(t *testing.T, e *streamEnv, id string, c credential) <-chan struct{} {
	req, _ := http.NewRequestWithContext(t.Context(), "POST", e.Srv.URL+"/v1/workspaces/"+id+"/exec?arg=sleep", nil)
	c.set(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if kind, p, err := api.ReadFrame(br, 1<<20); resp.StatusCode != 200 || err != nil || kind != api.FrameStdout {
		t.Fatalf("exec: %s, first frame %d %q %v", resp.Status, kind, p, err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		for {
			kind, p, err := api.ReadFrame(br, 1<<20)
			if err != nil {
				return
			}
			if kind == api.FrameError && !strings.Contains(string(p), "credential ended") {
				t.Errorf("exec ended with %q, want it to say the credential ended", p)
			}
		}
	}()
	return ended
}

func openLogs(t *testing.T, e *streamEnv, id string, c credential) <-chan struct{} {
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.Srv.URL+"/v1/workspaces/"+id+"/logs?follow=1", nil)
	c.set(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); resp.StatusCode != 200 || line != "line\n" {
		t.Fatalf("logs -f: %s, first line %q %v", resp.Status, line, err)
	}
	ended := make(chan struct{})
	go func() { defer close(ended); io.Copy(io.Discard, br); resp.Body.Close() }()
	return ended
}

// openUpgrade opens an Upgrade stream through the proxy and echoes one
// message through it.
func openUpgrade(t *testing.T, e *streamEnv, id string, c credential) <-chan struct{} {
	conn, br, status := dialUpgrade(t, e, id, c)
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("Upgrade through the proxy: %d", status)
	}
	io.WriteString(conn, "ping")
	if got := make([]byte, 4); func() error { _, err := io.ReadFull(br, got); return err }() != nil || string(got) != "ping" {
		t.Fatalf("no echo through the proxy: %q", got)
	}
	ended := make(chan struct{})
	go func() { defer close(ended); io.Copy(io.Discard, br) }()
	t.Cleanup(func() { conn.Close() })
	return ended
}

func dialUpgrade(t *testing.T, e *streamEnv, id string, c credential) (net.Conn, *bufio.Reader, int) {
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.Srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /w/%s/echo HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n%s\r\n\r\n", id, c.header)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body.Close()
		conn.Close()
	}
	return conn, br, resp.StatusCode
}

// Every open stream — exec, a followed log, a proxied Upgrade (WebSocket)
// — ends within 5 s of its credential's end: revoked, expired, logged out.
// (A page session never opens the proxy, so logout does not apply to it:
// the proxy refuses the session cookie with 403.)
func TestStreamsEndWithTheirCredential(t *testing.T) {
	kinds := map[string]openStream{"exec": openExec, "logs-follow": openLogs, "proxy-upgrade": openUpgrade}
	for kind, open := range kinds {
		for _, how := range []string{"revoked", "expired", "logged-out"} {
			t.Run(kind+"/"+how, func(t *testing.T) {
				t.Parallel()
				e := newStreamEnv(t, 50*time.Millisecond, false)
				c := e.credentials(t)[how]()
				if kind == "proxy-upgrade" && how == "logged-out" {
					if _, _, status := dialUpgrade(t, e, e.id, c); status != http.StatusForbidden {
						t.Fatalf("the proxy with a page session: %d, want 403", status)
					}
					return
				}
				ended := open(t, e, e.id, c)
				c.end()
				select {
				case <-ended:
				case <-time.After(5 * time.Second):
					t.Fatalf("the %s stream is still open 5 s after its credential was %s", kind, how)
				}
			})
		}
	}
}

// With the default re-check interval, a revoked token's exec ends within
// 5 s of real time.
func TestStreamEndsWithinFiveSecondsByDefault(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, 0, false)
	c := e.credentials(t)["revoked"]()
	ended := openExec(t, e, e.id, c)
	c.end()
	t0 := time.Now()
	select {
	case <-ended:
		t.Logf("ended %v after the revoke", time.Since(t0).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("exec still open 5 s after its token was revoked")
	}
	<-e.execDone
}

// An open proxied Upgrade (WebSocket) and an open exec session are
// activity for the idle TTL while they are open: their workspaces stay
// RUNNING for twice the idle timeout while a third, idle one stops; once
// closed, they stop on time (fake clock; the streams re-check on real time).
func TestOpenStreamsAreActivityForTheTTL(t *testing.T) {
	e := newStreamEnv(t, 20*time.Millisecond, true)
	sock, shell, quiet := e.workspace(t, "sock", "alice"), e.workspace(t, "shell", "alice"), e.workspace(t, "quiet", "alice")
	ttl, err := singletons.NewTTLManager(singletons.TTLConfig{IdleTimeout: 30 * time.Minute, Clock: e.clk}, e.st)
	if err != nil {
		t.Fatal(err)
	}
	c := e.credentials(t)["revoked"]() // not ended here
	conn, br, status := dialUpgrade(t, e, sock, c)
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("Upgrade through the proxy: %d", status)
	}
	stdin, execEnded := openExecStdin(t, e, shell, c)
	for range 6 { // 60 minutes, twice the idle timeout, in 10-minute steps
		e.clk.Advance(10 * time.Minute)
		now := e.clk.Now()
		wstest.WaitFor(t, 5*time.Second, "the open streams' activity at the new time", func() (bool, string) {
			_, a1, _ := e.st.DesiredVersion(t.Context(), sock)
			_, a2, _ := e.st.DesiredVersion(t.Context(), shell)
			return a1 != nil && !a1.Before(now) && a2 != nil && !a2.Before(now), fmt.Sprint(a1, a2, now)
		})
		if _, err := ttl.Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	e.wantDesired(t, "with the streams open for 60 min", map[string]workspace.Status{sock: workspace.Running, shell: workspace.Running, quiet: workspace.Standby})
	if _, err := io.WriteString(conn, "ping"); err != nil {
		t.Fatal(err)
	}
	if got := make([]byte, 4); func() error { _, err := io.ReadFull(br, got); return err }() != nil || string(got) != "ping" {
		t.Fatalf("the WebSocket was cut: %q", got)
	}
	conn.Close()
	stdin.Close()
	<-execEnded // the exec's handler returned (its stream stopped noting activity)
	// The proxied connection's stream ended: a tick of its activity between
	// the connection's close and its handler's return, once the clock had
	// moved on, noted activity 29 min late and failed a CI run.
	e.waitEnded(t, sock)
	e.clk.Advance(29 * time.Minute)
	if _, err := ttl.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.wantDesired(t, "29 min after the streams closed", map[string]workspace.Status{sock: workspace.Running, shell: workspace.Running})
	e.clk.Advance(2 * time.Minute)
	if _, err := ttl.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.wantDesired(t, "31 min after the streams closed", map[string]workspace.Status{sock: workspace.Standby, shell: workspace.Standby})
}

func (e *streamEnv) wantDesired(t *testing.T, when string, want map[string]workspace.Status) {
	t.Helper()
	for id, st := range want {
		if w, _ := e.st.Get(t.Context(), id); w.DesiredState != st {
			t.Errorf("%s %s: desired %s, want %s", w.Name, when, w.DesiredState, st)
		}
	}
}

// openExecStdin opens an exec with stdin; closing stdin ends the command
// (the fake's Exec reads stdin to its end), and ended is closed once the
// whole response has arrived.
func openExecStdin(t *testing.T, e *streamEnv, id string, c credential) (stdin io.Closer, ended <-chan struct{}) {
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", e.Srv.URL+"/v1/workspaces/"+id+"/exec?arg=cat&stdin=1", pr)
	c.set(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if kind, p, err := api.ReadFrame(br, 1<<20); resp.StatusCode != 200 || err != nil || kind != api.FrameStdout {
		t.Fatalf("exec: %s, first frame %d %q %v", resp.Status, kind, p, err)
	}
	done := make(chan struct{})
	go func() { defer close(done); io.Copy(io.Discard, br); resp.Body.Close() }()
	t.Cleanup(func() { pw.Close() })
	return pw, done
}
