package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// seen is what a workspace's app saw of one proxied request.
type seen struct {
	uri    string
	header http.Header
}

// proxiedApp is the API proxying into one RUNNING workspace whose app
// records each request, sets cookies on every answer (one of them the
// page's session cookie) and answers an Upgrade with 101.
func proxiedApp(t *testing.T) (env *wstest.APIEnv, id string, got <-chan seen) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	c := make(chan seen, 16)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c <- seen{r.RequestURI, r.Header.Clone()}
		w.Header().Add("Set-Cookie", "gantry_session=gwsess_planted; Path=/; HttpOnly")
		w.Header().Add("Set-Cookie", "evil=1; Path=/v1")
		if r.Header.Get("Upgrade") == "echo" {
			w.Header().Set("Upgrade", "echo")
			w.Header().Set("Connection", "Upgrade")
			w.WriteHeader(http.StatusSwitchingProtocols)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(app.Close)
	env = wstest.NewAPIEnv(t, st, api.APIConfig{Container: endpointFake{addr: strings.TrimPrefix(app.URL, "http://")}})
	w, err := st.Create(t.Context(), workspace.NewWorkspace{Name: "app", Desired: workspace.Running}, wstest.T0)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING"})
	return env, w.ID, c
}

// proxyGet sends a raw GET (the path as written, not normalised by a
// client) with extra header lines, and returns the response.
func proxyGet(t *testing.T, env *wstest.APIEnv, path string, extra ...string) *http.Response {
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.Srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n", path, env.Admin)
	for _, h := range extra {
		fmt.Fprintf(conn, "%s\r\n", h)
	}
	io.WriteString(conn, "\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// An encoded slash in a proxied path reaches the app encoded: the app
// sees the path the client sent, not its decoding (a%2F..%2Fecho is one
// segment, not a/../echo).
func TestProxyKeepsTheEncodedPath(t *testing.T) {
	env, id, got := proxiedApp(t)
	for _, p := range []string{"/a%2F..%2Fecho", "/files/a%2Fb/c?x=%2F", "/plain/path?q=1"} {
		resp := proxyGet(t, env, "/w/"+id+p)
		resp.Body.Close()
		if s := <-got; resp.StatusCode != 200 || s.uri != p {
			t.Errorf("GET /w/{id}%s: %s; the app saw %q, want %q", p, resp.Status, s.uri, p)
		}
	}
}

// The proxy drops the client's X-Real-IP and X-Forwarded-Port (the app
// must not trust a client's word for its address or port) and sets
// X-Forwarded-For to the client's address alone.
func TestProxyDropsClientForwardingHeaders(t *testing.T) {
	env, id, got := proxiedApp(t)
	resp := proxyGet(t, env, "/w/"+id+"/", "X-Real-IP: 6.6.6.6", "X-Forwarded-Port: 1", "X-Forwarded-For: 6.6.6.6", "Forwarded: for=6.6.6.6")
	resp.Body.Close()
	h := (<-got).header
	if v, ok := h["X-Real-Ip"]; ok {
		t.Errorf("the app saw the client's X-Real-IP %q", v)
	}
	if v, ok := h["X-Forwarded-Port"]; ok {
		t.Errorf("the app saw the client's X-Forwarded-Port %q", v)
	}
	if xff := h.Get("X-Forwarded-For"); xff != "127.0.0.1" || h.Get("Forwarded") != "" {
		t.Errorf("X-Forwarded-For %q, Forwarded %q: want the client's address alone, no Forwarded", xff, h.Get("Forwarded"))
	}
}

// No cookie a workspace's app sets reaches the client: the proxy serves
// apps on the API's origin, where an app's cookie would be the page's
// (gantry_session among them). Neither on an answer nor on a 101.
func TestProxyDropsSetCookieFromApps(t *testing.T) {
	env, id, got := proxiedApp(t)
	for _, extra := range [][]string{nil, {"Upgrade: echo", "Connection: Upgrade"}} {
		resp := proxyGet(t, env, "/w/"+id+"/login", extra...)
		resp.Body.Close()
		<-got
		if sc := resp.Header.Values("Set-Cookie"); len(sc) != 0 || (extra != nil && resp.StatusCode != http.StatusSwitchingProtocols) {
			t.Errorf("%v: %s, Set-Cookie %q reached the client", extra, resp.Status, sc)
		}
	}
}
