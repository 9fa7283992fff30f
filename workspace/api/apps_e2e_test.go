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
