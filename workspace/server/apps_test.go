package server

import (
	"net"
	"net/http/httptest"
	"testing"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	wsclient "github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider/fake"
)

// The apps domain defaults to localhost on a loopback listen (Chromium
// resolves *.localhost to loopback), none otherwise; the API's AppsURL is
// it on the listen port, https under TLS.
func TestAppsURLDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg  ServerConfig
		want string
	}{
		{ServerConfig{Listen: "127.0.0.1:7480"}, "http://localhost:7480"},
		{ServerConfig{Listen: "0.0.0.0:7480", InsecureListen: true}, ""},
		{ServerConfig{Listen: "0.0.0.0:443", TLSCert: "c", AppsDomain: "apps.example.com"}, "https://apps.example.com:443"},
	} {
		cfg := tc.cfg
		if cfg.AppsDomain == "" {
			fk := fake.New(0)
			cfg.Data, cfg.Container, cfg.Storage = t.TempDir(), fk, fk
			checked, err := cfg.checked()
			if err != nil {
				t.Fatal(err)
			}
			cfg = checked
		}
		if got := appsURL(cfg); got != tc.want {
			t.Errorf("%+v: AppsURL %q, want %q", tc.cfg.Listen, got, tc.want)
		}
	}
}

// With --listen 127.0.0.1:0 a workspace's app URL carries the port the
// server listens on, not 0.
func TestAppURLOfListenPortZero(t *testing.T) {
	addr, token := connServer(t, ServerConfig{}) // Listen 127.0.0.1:0
	_, port, _ := net.SplitHostPort(addr)
	c := &wsclient.Client{Base: "http://" + addr, Token: token}
	w, err := c.Create(t.Context(), workspace.NewWorkspace{Name: "web", Spec: workspace.Spec{Apps: []workspace.App{{Name: "api", Port: 8081}}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://web--admin.localhost:" + port + "/"; w.URL != want {
		t.Errorf("url %q, want %q", w.URL, want)
	}
	if len(w.Apps) != 2 || w.Apps[1].URL != "http://api--web--admin.localhost:"+port+"/" {
		t.Errorf("apps %+v, want api's URL on port %s", w.Apps, port)
	}
}

// Only a request whose Host is an app host of this server's apps domain is
// a stream for the app hosts' sake: a Host with "--" under another domain,
// or no app's label, is bounded like any other request.
func TestIsStreamParsesAppHosts(t *testing.T) {
	a := api.NewAPI(api.APIConfig{AppsURL: "http://localhost:7480"})
	for host, want := range map[string]bool{
		"web--alice.localhost:7480":      true,
		"api--web--alice.localhost:7480": true,
		"web--alice.example.com":         false,
		"a--b.evil.localhost:7480":       false,
		"web--alice-.localhost:7480":     false,
		"localhost:7480":                 false,
		"x--y":                           false,
	} {
		r := httptest.NewRequest("GET", "http://"+host+"/v1/workspaces", nil)
		if got := a.IsStream(r); got != want {
			t.Errorf("Host %s: IsStream %v, want %v", host, got, want)
		}
	}
}
