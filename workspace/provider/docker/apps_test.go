package docker

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// A workspace's second app, on a port other than PORT, is reached through
// the API at its own host api--{name}--{owner}: the container's IP (the
// Endpoint's) with the app's port. Public, so no login; the default app's
// host is still behind the login.
func TestSecondAppThroughTheAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the api package's tests cover app hosts; make test runs it")
	}
	p, cli := newTestProvider(t, Config{})
	netName := "gantry-ws-test-" + randID(t)
	if _, err := cli.NetworkCreate(t.Context(), netName, client.NetworkCreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.NetworkRemove(context.WithoutCancel(t.Context()), netName, client.NetworkRemoveOptions{}) })
	p.cfg.NetworkMode = netName
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	ctx := t.Context()
	owner := "dk" + randID(t) // unique: containers of other runs may share the engine
	w, err := st.Create(ctx, workspace.NewWorkspace{Name: "web", Owner: owner, Desired: workspace.Running,
		Spec: workspace.Spec{Apps: []workspace.App{{Name: "api", Port: 8081, Share: workspace.SharePublic}}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cleanupWorkspace(t, p, w.ID)
	if err := p.Start(ctx, provider.Spec{ID: w.ID, VolumeDir: t.TempDir(), Env: []string{"WS_APP_PORT=8081"}}); err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": "RUNNING"})
	srv := httptest.NewServer(api.NewAPI(api.APIConfig{Store: st, Accounts: st.Accounts(), Container: p, AppsURL: "http://localhost"}))
	defer srv.Close()
	get := func(host string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/x/y", nil)
		req.Host = host
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	want := fmt.Sprintf("app on 8081 of %s at /x/y", w.ID)
	testutil.WaitFor(t, 10*time.Second, "the second app's answer at its host", func() (bool, string) {
		code, body := get("api--web--" + owner + ".localhost")
		return code == 200 && body == want, fmt.Sprintf("%d %q", code, body)
	})
	if code, body := get("web--" + owner + ".localhost"); code != http.StatusFound || strings.Contains(body, "hello") {
		t.Errorf("the owner-only default app without a session: %d %q, want the login (302)", code, body)
	}
}
