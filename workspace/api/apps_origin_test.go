package api_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// endpointMap is a provider whose workspaces' PORTs are the given
// addresses, by workspace id.
type endpointMap struct {
	provider.Container
	mu    sync.Mutex
	addrs map[string]string
}

func (e *endpointMap) Endpoint(_ context.Context, id string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addrs[id], nil
}

// recordingApp is a workspace's app that records the headers (and Host) of
// every request it gets, and answers each with a small HTML page naming
// itself.
type recordingApp struct {
	name, addr string
	mu         sync.Mutex
	seen       []http.Header // each with "Host" added
}

func (a *recordingApp) headers() []http.Header {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]http.Header(nil), a.seen...)
}

// anySaw reports the first header line any request carried that contains
// s (case-insensitive), "" if none.
func (a *recordingApp) anySaw(s string) string {
	for _, h := range a.headers() {
		for k, vs := range h {
			for _, v := range vs {
				if line := k + ": " + v; strings.Contains(strings.ToLower(line), strings.ToLower(s)) {
					return line
				}
			}
		}
	}
	return ""
}

// recordingApps is the API (apps domain localhost unless cfg names one)
// over RUNNING workspaces of alice, one per name, each with its
// recordingApp; it notes each request to the API's own host.
type recordingApps struct {
	*appEnv
	domain string
	apps   map[string]*recordingApp
	mu     sync.Mutex
	hits   []apiHit
}

// apiHit is a request to the API's host: whether it carried the page's
// session cookie, and where the browser said it came from.
type apiHit struct {
	method, path, secFetchSite, origin string
	session                            bool
}

func newRecordingApps(t *testing.T, cfg api.APIConfig, names ...string) *recordingApps {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	prov := &endpointMap{addrs: map[string]string{}}
	if cfg.AppsURL == "" {
		cfg.AppsURL = "http://localhost"
	}
	if cfg.RecheckEvery == 0 {
		cfg.RecheckEvery = 100 * time.Millisecond
	}
	cfg.Container, cfg.Store, cfg.Accounts = prov, st, st.Accounts()
	au, _ := url.Parse(cfg.AppsURL)
	ra := &recordingApps{domain: au.Hostname(), apps: map[string]*recordingApp{}}
	h := api.NewAPI(cfg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hn, _, _ := net.SplitHostPort(r.Host); hn == ra.domain {
			_, err := r.Cookie(auth.SessionCookie)
			ra.mu.Lock()
			ra.hits = append(ra.hits, apiHit{r.Method, r.URL.Path, r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Origin"), err == nil})
			ra.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	env := &wstest.APIEnv{St: st, Srv: srv, Admin: storetest.Token(t, st, workspace.AdminOwner, true)}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(env.Srv.URL, "http://"))
	ra.appEnv = &appEnv{env: env, port: port, alice: storetest.Token(t, st, "alice", false), bob: storetest.Token(t, st, "bob", false)}
	for _, name := range names {
		app := newRecordingApp(t, name)
		w, err := st.Create(t.Context(), workspace.NewWorkspace{Name: name, Owner: "alice", Desired: workspace.Running}, wstest.T0)
		if err != nil {
			t.Fatal(err)
		}
		storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING"})
		prov.mu.Lock()
		prov.addrs[w.ID] = app.addr
		prov.mu.Unlock()
		ra.apps[name] = app
	}
	return ra
}

func newRecordingApp(t *testing.T, name string) *recordingApp {
	app := &recordingApp{name: name}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("Host", r.Host)
		app.mu.Lock()
		app.seen = append(app.seen, h)
		app.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Add("Set-Cookie", name+"cookie="+name+"-secret; Path=/")
		w.Header().Add("Set-Cookie", "__Host-gantry_app=planted; Path=/; Secure")
		io.WriteString(w, `<!doctype html><title>app `+name+`</title><p id="app">app `+name+` at `+r.URL.Path+`</p>`)
	}))
	t.Cleanup(srv.Close)
	app.addr = strings.TrimPrefix(srv.URL, "http://")
	return app
}

// apiHits is what reached the API's host so far.
func (ra *recordingApps) apiHits() []apiHit {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	return append([]apiHit(nil), ra.hits...)
}

// url is app name's origin.
func (ra *recordingApps) url(name string) string {
	return "http://" + name + "--alice." + ra.domain + ":" + ra.port
}

func (ra *recordingApps) apiOrigin() string { return "http://" + ra.domain + ":" + ra.port }

// An app host's own Origin reaches the app as the origin of the Host the
// proxy sends it (the app's address), so an app that compares Origin with
// Host (Jupyter) sees a same-origin request; any other Origin (another
// app's, the API's, another site's, "null") reaches it unchanged.
func TestAppOriginPresentedAsUpstreams(t *testing.T) {
	ra := newRecordingApps(t, api.APIConfig{}, "web", "other")
	c := ra.browser(t)
	ra.login(t, c, ra.alice)
	if h := last(walk(t, c, ra.url("web")+"/")); !strings.HasPrefix(h.status, "200") {
		t.Fatalf("app: %+v", h)
	}
	app := ra.apps["web"]
	cases := []struct{ origin, want string }{
		{ra.url("web"), "http://" + app.addr},
		{strings.ToUpper(ra.url("web")), "http://" + app.addr},
		{ra.url("other"), ra.url("other")},
		{ra.apiOrigin(), ra.apiOrigin()},
		{"http://web--alice.localhost", "http://web--alice.localhost"}, // another port
		{"https://evil.example", "https://evil.example"},
		{"null", "null"},
	}
	for _, tc := range cases {
		for _, method := range []string{"GET", "POST"} {
			req, _ := http.NewRequestWithContext(t.Context(), method, ra.url("web")+"/x", nil)
			req.Header.Set("Origin", tc.origin)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			hs := app.headers()
			got := hs[len(hs)-1]
			if resp.StatusCode != 200 || got.Get("Origin") != tc.want || got.Get("Host") != app.addr {
				t.Errorf("%s with Origin %q: %s; the app saw Origin %q, Host %q; want Origin %q, Host %q",
					method, tc.origin, resp.Status, got.Get("Origin"), got.Get("Host"), tc.want, app.addr)
			}
		}
	}
}
