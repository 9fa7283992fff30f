package api_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace/wstest"
)

// `ws serve` on loopback serves each workspace's app on its own
// *.localhost host: `ws get` (and --json) gives its url, and a browser logged in
// at the API's origin (localhost) reaches the app there, at /.
func TestAppHostServe(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	python3(t)
	s := wstest.StartServe(t, "", t.TempDir())
	alice := strings.TrimSpace(s.CLI("token", "create", "--owner", "alice"))
	asAlice := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(s.Bin, append([]string{"ws", "--server", s.URL, "--token", alice}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("alice %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	id := asAlice("create", "web", "--desired", "RUNNING", "--cmd", `exec python3 -m http.server --bind 127.0.0.1 "$PORT"`)
	asAlice("wait", id, "RUNNING", "--timeout", "30s")
	var row struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(asAlice("get", "web", "--json")), &row); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
	if row.URL != "http://web--alice.localhost:"+port+"/" {
		t.Fatalf("url %q", row.URL)
	}
	if out := asAlice("get", "web"); !strings.Contains(out+"\n", "\nurl:             "+row.URL+"\n") {
		t.Errorf("ws get shows no url:\n%s", out)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, strings.TrimPrefix(s.URL, "http://"))
		}}}
	e := &appEnv{port: port}
	e.login(t, c, alice)
	wstest.WaitFor(t, 20*time.Second, "the app to answer on its host", func() (bool, string) {
		h := last(walk(t, c, row.URL))
		return strings.HasPrefix(h.status, "200") && strings.Contains(h.body, "Directory listing"), h.status + " " + h.body
	})
}

// A second app, declared with `ws create --app api=8081,share=public`, is
// served from its own port inside the workspace (its own network
// namespace: the process provider as root) at api--{name}--{owner}: with
// no credentials at all while public, behind the login once `ws update
// --app api=8081` puts it back to owner. `ws get --json` lists both apps.
func TestSecondAppServe(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	python3(t)
	s := wstest.StartServe(t, "", t.TempDir())
	alice := strings.TrimSpace(s.CLI("token", "create", "--owner", "alice2"))
	asAlice := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(s.Bin, append([]string{"ws", "--server", s.URL, "--token", alice}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("alice %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	cmd := `mkdir -p two && echo second-app > two/index.html && (cd two && exec python3 -m http.server --bind 127.0.0.1 8081) & exec python3 -m http.server --bind 127.0.0.1 "$PORT"`
	id := asAlice("create", "two", "--desired", "RUNNING", "--cmd", cmd, "--app", "api=8081,share=public")
	asAlice("wait", id, "RUNNING", "--timeout", "30s")
	var row struct {
		Apps []struct {
			Name, Share, URL string
			Port             int
		} `json:"apps"`
	}
	if err := json.Unmarshal([]byte(asAlice("get", "two", "--json")), &row); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
	apiURL := "http://api--two--alice2.localhost:" + port + "/"
	if len(row.Apps) != 2 || row.Apps[0].Name != "main" || row.Apps[0].URL != "http://two--alice2.localhost:"+port+"/" ||
		row.Apps[1].Name != "api" || row.Apps[1].Port != 8081 || row.Apps[1].Share != "public" || row.Apps[1].URL != apiURL {
		t.Fatalf("apps %+v", row.Apps)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, strings.TrimPrefix(s.URL, "http://"))
		}}}
	wstest.WaitFor(t, 20*time.Second, "the public app to answer on its host", func() (bool, string) {
		h := last(walk(t, c, apiURL))
		return strings.HasPrefix(h.status, "200") && strings.Contains(h.body, "second-app"), h.status + " " + h.body
	})
	if h := walk(t, c, "http://two--alice2.localhost:"+port+"/"); !strings.HasPrefix(h[0].status, "302") {
		t.Errorf("the owner-only main app without a session: %+v, want the login", h[0])
	}
	asAlice("update", "two", "--app", "api=8081")
	if h := walk(t, c, apiURL); !strings.HasPrefix(h[0].status, "302") || strings.Contains(last(h).body, "second-app") {
		t.Errorf("api back to owner, no session: %+v, want the login", h)
	}
}
