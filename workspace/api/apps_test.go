package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// appEnv is the API with apps domain localhost over one RUNNING workspace
// "web" of alice, whose app echoes the request headers it saw.
type appEnv struct {
	env        *wstest.APIEnv
	port       string
	alice, bob string // tokens
}

func newAppEnv(t *testing.T) *appEnv {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" {
			w.Header().Set("Upgrade", "echo")
			w.Header().Set("Connection", "Upgrade")
			w.WriteHeader(http.StatusSwitchingProtocols)
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err == nil {
				line, _ := brw.ReadString('\n')
				io.WriteString(conn, "echo:"+line)
				conn.Close()
			}
			return
		}
		if r.URL.Path == "/hold" { // an open stream until the proxy ends it
			io.WriteString(w, "holding\n")
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
			return
		}
		w.Header().Add("Set-Cookie", "appcookie=1; Path=/")
		w.Header().Add("Set-Cookie", "wide=1; Path=/; Domain=localhost")
		w.Header().Add("Set-Cookie", "gantry_session=planted; Path=/")
		io.WriteString(w, "path="+r.URL.RequestURI()+"\n")
		r.Header.Write(w)
	}))
	t.Cleanup(app.Close)
	env := wstest.NewAPIEnv(t, st, api.APIConfig{Container: endpointFake{addr: strings.TrimPrefix(app.URL, "http://")},
		AppsURL: "http://localhost", RecheckEvery: 100 * time.Millisecond})
	w, err := st.Create(t.Context(), workspace.NewWorkspace{Name: "web", Owner: "alice", Desired: workspace.Running}, wstest.T0)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING"})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(env.Srv.URL, "http://"))
	return &appEnv{env: env, port: port, alice: storetest.Token(t, st, "alice", false), bob: storetest.Token(t, st, "bob", false)}
}

// browser is an HTTP client with a cookie jar whose every *.localhost (and
// localhost) reaches the test server; it does not follow redirects.
func (e *appEnv) browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	addr := strings.TrimPrefix(e.env.Srv.URL, "http://")
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(a)
			if host != "localhost" && !strings.HasSuffix(host, ".localhost") {
				t.Errorf("dial %s: not localhost", a)
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
}

type hop struct {
	url, status, location, body string
	setCookies                  []string
}

// walk GETs u and follows redirects by hand, across hosts, returning each hop.
func walk(t *testing.T, c *http.Client, u string) []hop {
	t.Helper()
	var hops []hop
	for range 10 {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", u, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := hop{u, resp.Status, resp.Header.Get("Location"), string(b), resp.Header.Values("Set-Cookie")}
		hops = append(hops, h)
		if h.location == "" {
			return hops
		}
		next, err := resp.Request.URL.Parse(h.location)
		if err != nil {
			t.Fatal(err)
		}
		u = next.String()
	}
	t.Fatalf("too many redirects: %v", hops)
	return nil
}

func last(h []hop) hop { return h[len(h)-1] }

// login gives c a page session of token at the API's origin (localhost).
func (e *appEnv) login(t *testing.T, c *http.Client, token string) {
	t.Helper()
	resp, err := c.Post("http://localhost:"+e.port+"/v1/session", "application/json", strings.NewReader(`{"token":"`+token+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("login: %s", resp.Status)
	}
}

func (e *appEnv) appURL() string { return "http://web--alice.localhost:" + e.port }

// An app host without a cookie sends the browser to the API's authorize
// page (a login form without a page session); with alice's page session
// the code comes back to the app host, which sets a host-only gantry_app
// and returns to the path asked for; the app then answers, never seeing
// gantry_session, gantry_app nor Authorization, and its cookies for a wider
// domain or named gantry_ never reach the browser.
func TestAppHostLogin(t *testing.T) {
	e := newAppEnv(t)
	c := e.browser(t)
	hops := walk(t, c, e.appURL()+"/deep/path?x=1")
	if len(hops) != 2 || !strings.HasPrefix(hops[0].location, "http://localhost:"+e.port+"/v1/apps/authorize?") || !strings.HasPrefix(hops[1].status, "401") || !strings.Contains(hops[1].body, "app-login") {
		t.Fatalf("no session: %+v, want a redirect to authorize and a login form", hops)
	}
	e.login(t, c, e.alice)
	hops = walk(t, c, e.appURL()+"/deep/path?x=1")
	if len(hops) != 4 || !strings.Contains(hops[1].location, "web--alice.localhost:"+e.port+"/.gantry/callback?code=") {
		t.Fatalf("with a session: %+v", hops)
	}
	cb := hops[2]
	if cb.location != "/deep/path?x=1" || len(cb.setCookies) != 1 {
		t.Fatalf("callback: %+v", cb)
	}
	ck := strings.ToLower(cb.setCookies[0])
	if !strings.HasPrefix(ck, "gantry_app=") || strings.Contains(ck, "domain") || !strings.Contains(ck, "httponly") || !strings.Contains(ck, "samesite=lax") {
		t.Errorf("app cookie %q: want host-only, HttpOnly, SameSite=Lax", cb.setCookies[0])
	}
	body := last(hops).body
	if !strings.HasPrefix(body, "path=/deep/path?x=1\n") {
		t.Errorf("app answered %q", body)
	}
	for _, leak := range []string{"gantry_session", "gantry_app", "Authorization"} {
		if strings.Contains(body, leak) {
			t.Errorf("the app saw %s:\n%s", leak, body)
		}
	}
	if sc := last(hops).setCookies; len(sc) != 1 || !strings.HasPrefix(sc[0], "appcookie=") {
		t.Errorf("app's Set-Cookie reaching the browser: %q, want appcookie only", sc)
	}
	// A bearer token on the app host is no way in, and is not passed on.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.appURL()+"/", nil)
	req.Header.Set("Authorization", "Bearer "+e.alice)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(b), "Authorization") {
		t.Errorf("with the cookie and a bearer header: %s\n%s", resp.Status, b)
	}
}

// authorizeCode walks c to authorize for host and returns the callback URL.
func (e *appEnv) authorizeCode(t *testing.T, c *http.Client, host string) string {
	t.Helper()
	q := url.Values{"host": {host + ":" + e.port}, "return": {"/"}}
	resp, err := c.Get("http://localhost:" + e.port + "/v1/apps/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize %s: %s", host, resp.Status)
	}
	return resp.Header.Get("Location")
}

// A code works once, on its own host only; another owner gets no code.
func TestAppCodes(t *testing.T) {
	e := newAppEnv(t)
	c := e.browser(t)
	e.login(t, c, e.alice)
	cb := e.authorizeCode(t, c, "web--alice.localhost")
	if h := walk(t, e.browser(t), cb); !strings.HasPrefix(h[0].status, "302") || len(h[0].setCookies) != 1 {
		t.Fatalf("first use: %+v", h)
	}
	if h := walk(t, e.browser(t), cb); !strings.HasPrefix(h[0].status, "401") || len(h[0].setCookies) != 0 {
		t.Errorf("replayed code: %+v, want 401 and no cookie", h[0])
	}
	cb = e.authorizeCode(t, c, "web--alice.localhost")
	other := strings.Replace(cb, "web--alice.localhost", "api--alice.localhost", 1)
	if h := walk(t, e.browser(t), other); !strings.HasPrefix(h[0].status, "401") || len(h[0].setCookies) != 0 {
		t.Errorf("code of host A on host B: %+v, want 401", h[0])
	}
	bob := e.browser(t)
	e.login(t, bob, e.bob)
	hops := walk(t, bob, e.appURL()+"/")
	if l := last(hops); !strings.HasPrefix(l.status, "404") || strings.Contains(l.body, "path=") {
		t.Errorf("bob on alice's app: %+v, want 404 at authorize", hops)
	}
}

// Logging out of the page ends the app session, an open request to the
// app included, within RecheckEvery.
func TestAppSessionEndsWithLogout(t *testing.T) {
	e := newAppEnv(t)
	c := e.browser(t)
	e.login(t, c, e.alice)
	if h := last(walk(t, c, e.appURL()+"/")); !strings.HasPrefix(h.status, "200") {
		t.Fatalf("app: %+v", h)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://localhost:"+e.port+"/v1/session/logout", nil)
	req.Header.Set("Origin", "http://localhost:"+e.port)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %s", resp.Status)
	}
	testutil.WaitFor(t, 5*time.Second, "the app session to end", func() (bool, string) {
		h := walk(t, c, e.appURL()+"/")
		return strings.HasPrefix(h[0].status, "302") && strings.Contains(h[0].location, "/v1/apps/authorize"), h[0].status
	})
}

// Revoking the token behind the page session ends the app session, and a
// request open to the app, within RecheckEvery (well within 5 s).
func TestAppSessionEndsWithRevocation(t *testing.T) {
	e := newAppEnv(t)
	c := e.browser(t)
	e.login(t, c, e.alice)
	if h := last(walk(t, c, e.appURL()+"/")); !strings.HasPrefix(h.status, "200") {
		t.Fatalf("app: %+v", h)
	}
	resp, err := c.Get(e.appURL() + "/hold")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := make([]byte, 8)
	if _, err := io.ReadFull(resp.Body, line); err != nil || string(line) != "holding\n" {
		t.Fatalf("hold: %s %q %v", resp.Status, line, err)
	}
	id, err := auth.ParseSecret(auth.TokenPrefix, e.alice)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := e.env.Client(e.env.Admin).RevokeToken(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()
	select {
	case <-ended:
	case <-time.After(5 * time.Second): // real time: the bound under test
		t.Fatal("the open app request outlived the revoked token by 5 s")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("open request ended %s after revocation", took)
	}
	if h := walk(t, c, e.appURL()+"/"); !strings.HasPrefix(h[0].status, "302") {
		t.Errorf("after revocation: %+v, want a redirect to authorize", h[0])
	}
}

// ws get --json's row carries the app URL.
func TestWorkspaceRowHasAppURL(t *testing.T) {
	e := newAppEnv(t)
	w, err := e.env.Client(e.alice).Get(t.Context(), "web")
	if err != nil {
		t.Fatal(err)
	}
	if w.URL != "http://web--alice.localhost/" {
		t.Errorf("url %q", w.URL)
	}
}

// Authorize sends codes only to this server's port, and returns only to a
// path on the app host, never another host.
func TestAppAuthorizeStaysHere(t *testing.T) {
	e := newAppEnv(t)
	c := e.browser(t)
	e.login(t, c, e.alice)
	q := url.Values{"host": {"web--alice.localhost:1"}, "return": {"/"}}
	if h := walk(t, c, "http://localhost:"+e.port+"/v1/apps/authorize?"+q.Encode()); !strings.HasPrefix(h[0].status, "400") {
		t.Errorf("code for another port: %+v, want 400", h[0])
	}
	for _, ret := range []string{"//evil.example/", "/\\evil.example/", "/\t/evil.example/", "https://evil.example/"} {
		q := url.Values{"host": {"web--alice.localhost:" + e.port}, "return": {ret}}
		hops := walk(t, c, "http://localhost:"+e.port+"/v1/apps/authorize?"+q.Encode())
		if len(hops) < 2 || hops[1].location != "/" {
			t.Errorf("return %q: %+v, want back to /", ret, hops)
		}
	}
}

// A gantry_app cookie planted for the whole apps domain (by another app's
// page, with a longer path) neither gets in nor shadows the host's own.
func TestAppPlantedCookie(t *testing.T) {
	e := newAppEnv(t)
	c := e.browser(t)
	e.login(t, c, e.alice)
	if h := last(walk(t, c, e.appURL()+"/deep/x")); !strings.HasPrefix(h.status, "200") {
		t.Fatalf("app: %+v", h)
	}
	u, _ := url.Parse(e.appURL() + "/deep/")
	c.Jar.SetCookies(u, []*http.Cookie{{Name: api.AppCookie, Value: "planted", Path: "/deep", Domain: "localhost"}})
	if cs := c.Jar.Cookies(u); len(cs) < 2 || cs[0].Value != "planted" {
		t.Fatalf("jar: %v, want the planted cookie first", cs)
	}
	hops := walk(t, c, e.appURL()+"/deep/x")
	if len(hops) != 1 || !strings.HasPrefix(hops[0].status, "200") || strings.Contains(hops[0].body, "planted") {
		t.Errorf("with a planted cookie: %+v", hops)
	}
}

// An Upgrade (a WebSocket's) on the app host reaches the app with the app
// cookie, and its bytes flow both ways.
func TestAppHostUpgrade(t *testing.T) {
	e := newAppEnv(t)
	c := e.browser(t)
	e.login(t, c, e.alice)
	if h := last(walk(t, c, e.appURL()+"/")); !strings.HasPrefix(h.status, "200") {
		t.Fatalf("app: %+v", h)
	}
	u, _ := url.Parse(e.appURL() + "/")
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.env.Srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /sock HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n", u.Host)
	for _, ck := range c.Jar.Cookies(u) {
		fmt.Fprintf(conn, "Cookie: %s=%s\r\n", ck.Name, ck.Value)
	}
	io.WriteString(conn, "\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(conn, "hi\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo:hi\n" {
		t.Errorf("through the upgrade: %q %v", line, err)
	}
}
