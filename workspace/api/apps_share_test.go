package api_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	wsclient "github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// setApps sets apps of alice's web, as alice, through the API.
func (e *appEnv) setApps(t *testing.T, apps ...workspace.App) {
	t.Helper()
	if _, err := e.env.Client(e.alice).Update(t.Context(), "web", workspace.SpecUpdate{AppSet: apps}); err != nil {
		t.Fatal(err)
	}
}

// secondApp is an HTTP server on a port of its own, answering "second
// path=…"; it returns that port.
func secondApp(t *testing.T) int {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "second path="+r.URL.RequestURI()+"\n")
		r.Header.Write(w)
	}))
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	port, _ := strconv.Atoi(p)
	return port
}

// plainGet GETs u with c and the given extra headers; it returns the
// status, the body and the Set-Cookie lines.
func plainGet(t *testing.T, c *http.Client, u string, hdr ...string) (int, string, []string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Values("Set-Cookie")
}

// Share levels: owner (the default) refuses another owner's session and a
// browser without one; authenticated admits another owner's session
// through the app login (still not a browser without one); public admits
// a request without any credentials and sets no gantry cookie; setting
// each wider level is audited, naming the app and the level; lowering it
// back to owner ends the other owner's app session and his open request.
func TestAppShareLevels(t *testing.T) {
	e := newAppEnv(t)
	bob, anon := e.browser(t), e.browser(t)
	e.login(t, bob, e.bob)
	if l := last(walk(t, bob, e.appURL()+"/")); !strings.HasPrefix(l.status, "404") || strings.Contains(l.body, "path=") {
		t.Errorf("owner: bob got %+v, want 404", l)
	}
	if h := walk(t, anon, e.appURL()+"/"); !strings.HasPrefix(h[0].status, "302") || strings.Contains(last(h).body, "path=") {
		t.Errorf("owner: no session got %+v, want the login", h)
	}

	e.setApps(t, workspace.App{Name: "main", Share: workspace.ShareAuthenticated})
	hops := walk(t, bob, e.appURL()+"/x")
	if l := last(hops); len(hops) != 4 || !strings.Contains(hops[1].location, "/.gantry/callback?code=") || !strings.HasPrefix(l.body, "path=/x\n") {
		t.Errorf("authenticated: bob got %+v, want the app through the login", hops)
	}
	if h := walk(t, anon, e.appURL()+"/"); !strings.HasPrefix(h[0].status, "302") || strings.Contains(last(h).body, "path=") {
		t.Errorf("authenticated: no session got %+v, want the login", h)
	}

	e.setApps(t, workspace.App{Name: "main", Share: workspace.SharePublic})
	code, body, cookies := plainGet(t, e.browser(t), e.appURL()+"/p", "Authorization", "Bearer "+e.alice, "Cookie", "gantry_session=s; gantry_app=a; mine=1")
	if code != 200 || !strings.HasPrefix(body, "path=/p\n") || !strings.Contains(body, "mine=1") {
		t.Errorf("public: %d %q, want the app", code, body)
	}
	for _, leak := range []string{"gantry_session", "gantry_app", "Authorization"} {
		if strings.Contains(body, leak) {
			t.Errorf("public: the app saw %s", leak)
		}
	}
	for _, c := range cookies {
		if strings.HasPrefix(c, "gantry_") {
			t.Errorf("public: gantry cookie set: %q", c)
		}
	}

	e.setApps(t, workspace.App{Name: "main", Share: workspace.ShareAuthenticated})
	checkLowered(t, e, bob)
	checkShareAudit(t, e)
}

// checkLowered: bob's open request and app session end once main is back
// to owner.
func checkLowered(t *testing.T, e *appEnv, bob *http.Client) {
	resp, err := bob.Get(e.appURL() + "/hold")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := make([]byte, 8)
	if _, err := io.ReadFull(resp.Body, line); err != nil || string(line) != "holding\n" {
		t.Fatalf("bob's hold: %s %q %v", resp.Status, line, err)
	}
	e.setApps(t, workspace.App{Name: "main", Share: workspace.ShareOwner})
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()
	select {
	case <-ended:
	case <-time.After(5 * time.Second): // real time: the bound under test
		t.Fatal("bob's open request outlived the share level's lowering by 5 s")
	}
	if h := walk(t, bob, e.appURL()+"/"); !strings.HasPrefix(last(h).status, "404") || strings.Contains(last(h).body, "path=") {
		t.Errorf("owner again: bob got %+v, want 404", h)
	}
}

// checkShareAudit: the audit log has a row for each wider level set.
func checkShareAudit(t *testing.T, e *appEnv) {
	w, err := e.env.Client(e.alice).Get(t.Context(), "web")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := e.env.Client(e.env.Admin).Audit(t.Context(), wsclient.AuditQuery{Workspace: w.ID})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range rows {
		if r.Action == "workspace.app.share" && r.Owner == "alice" && strings.Contains(r.Detail, "app main ") {
			for _, level := range []string{"authenticated", "public", "owner"} {
				if strings.HasSuffix(r.Detail, ": "+level) {
					seen[level]++
				}
			}
		}
	}
	if seen["authenticated"] != 2 || seen["public"] != 1 || seen["owner"] != 0 {
		t.Errorf("share audit rows by level %v, want authenticated twice, public once; rows: %+v", seen, rows)
	}
}

// A second app, on a port of its own, is reached at its own host
// {app}--{name}--{owner} (after its own login), the default app still at
// {name}--{owner}; the row lists both with their URLs.
func TestSecondAppAtItsHost(t *testing.T) {
	e := newAppEnv(t)
	port := secondApp(t)
	e.setApps(t, workspace.App{Name: "api", Port: port})
	c := e.browser(t)
	e.login(t, c, e.alice)
	hops := walk(t, c, "http://api--web--alice.localhost:"+e.port+"/q?a=1")
	if l := last(hops); len(hops) != 4 || !strings.HasPrefix(l.status, "200") || !strings.HasPrefix(l.body, "second path=/q?a=1\n") {
		t.Errorf("api app: %+v", hops)
	}
	if l := last(walk(t, c, e.appURL()+"/")); !strings.HasPrefix(l.body, "path=/\n") {
		t.Errorf("main app: %+v", l)
	}
	bob := e.browser(t)
	e.login(t, bob, e.bob)
	if l := last(walk(t, bob, "http://api--web--alice.localhost:"+e.port+"/")); !strings.HasPrefix(l.status, "404") {
		t.Errorf("bob on the owner-only api app: %+v", l)
	}
	w, err := e.env.Client(e.alice).Get(t.Context(), "web")
	if err != nil {
		t.Fatal(err)
	}
	want := []workspace.App{{Name: "main", Share: "owner", URL: "http://web--alice.localhost/"},
		{Name: "api", Port: port, Share: "owner", URL: "http://api--web--alice.localhost/"}}
	if len(w.Apps) != 2 || w.Apps[0] != want[0] || w.Apps[1] != want[1] {
		t.Errorf("apps %+v, want %+v", w.Apps, want)
	}
}

// A label that reads both ways ({app}--{name} or a name with "--")
// resolves to the workspace named by all of it first: workspace "web--foo"
// shadows app "web" of workspace "foo", and its owner-only level holds
// there even though foo's app is public. Without it, the host is foo's
// public app. An unknown label asks for the login, as an owner-only app.
func TestAppHostResolution(t *testing.T) {
	e := newAppEnv(t)
	port := secondApp(t)
	st := e.env.St
	foo, err := st.Create(t.Context(), workspace.NewWorkspace{Name: "foo", Owner: "alice", Desired: workspace.Running,
		Spec: workspace.Spec{Apps: []workspace.App{{Name: "web", Port: port, Share: workspace.SharePublic}}}}, wstest.T0)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, foo.ID, map[string]any{"observed_status": "RUNNING"})
	host := "http://web--foo--alice.localhost:" + e.port + "/"
	if code, body, _ := plainGet(t, e.browser(t), host); code != 200 || !strings.HasPrefix(body, "second path=/") {
		t.Fatalf("foo's public app web: %d %q", code, body)
	}
	if code, _, _ := plainGet(t, e.browser(t), "http://nope--foo--alice.localhost:"+e.port+"/"); code != http.StatusFound {
		t.Errorf("an app foo does not have: %d, want the login (302)", code)
	}
	shadow, err := st.Create(t.Context(), workspace.NewWorkspace{Name: "web--foo", Owner: "alice", Desired: workspace.Running}, wstest.T0)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, shadow.ID, map[string]any{"observed_status": "RUNNING"})
	if code, body, _ := plainGet(t, e.browser(t), host); code != http.StatusFound || strings.Contains(body, "path=") {
		t.Errorf("shadowed by workspace web--foo: %d %q, want its login (302), not foo's public app", code, body)
	}
	c := e.browser(t)
	e.login(t, c, e.alice)
	if l := last(walk(t, c, host)); !strings.HasPrefix(l.body, "path=/\n") {
		t.Errorf("alice at web--foo--alice: %+v, want workspace web--foo's main app", l)
	}
}

// A bad app is refused with 400, naming the entry, at create and update.
func TestAppSpecRefused(t *testing.T) {
	e := newAppEnv(t)
	c := e.env.Client(e.alice)
	_, err := c.Create(t.Context(), workspace.NewWorkspace{Name: "x", Spec: workspace.Spec{Apps: []workspace.App{{Name: "a--b", Port: 8081}}}})
	if err == nil || !strings.Contains(err.Error(), `app name "a--b"`) || !strings.Contains(err.Error(), "400") {
		t.Errorf("create with app a--b: %v, want 400 naming it", err)
	}
	_, err = c.Update(t.Context(), "web", workspace.SpecUpdate{AppSet: []workspace.App{{Name: "api", Port: 70000}}})
	if err == nil || !strings.Contains(err.Error(), "app api: port 70000") || !strings.Contains(err.Error(), "400") {
		t.Errorf("update with port 70000: %v, want 400 naming it", err)
	}
}
