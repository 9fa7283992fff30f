package live

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gantryhq/gantry/internal/testutil/browser"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// The page end to end in headless Chromium: log in with alice's token, see
// only alice's workspaces (never bob's), create one in the form, press "up",
// and see RUNNING appear without a reload (SSE) with an "open" link to its
// app's own origin; a page on another origin
// that posts to the API with alice's cookie is refused; log out. The
// screenshot goes to $GANTRY_SCREENSHOT (e.g. docs/ws-page.png) or the
// test's temp dir.
func TestPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	s := newStack(t, true)
	ctx := browser.Start(t, t.Context(), 1000, 420)

	// A second workspace of alice's that stays archived, so the screenshot
	// shows both, and one of bob's that alice must never see.
	alice := s.as(storetest.Token(t, s.st, "alice", false))
	bob := s.as(storetest.Token(t, s.st, "bob", false))
	alice.post(t, "/v1/workspaces", map[string]any{"name": "archived-demo", "desired_state": "PENDING"})
	bob.post(t, "/v1/workspaces", map[string]any{"name": "bobs-secret", "desired_state": "PENDING"})
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `<!doctype html><title>elsewhere</title><script>
fetch(`+strconv.Quote(s.url+"/v1/workspaces")+`, {method: "POST", mode: "no-cors", credentials: "include",
  headers: {"Content-Type": "text/plain"}, body: JSON.stringify({name: "csrf"})})
  .then(() => { document.title = "sent" }, () => { document.title = "sent" });
</script>`)
	}))
	defer evil.Close()

	row := `tr[data-name="demo"]`
	steps := []struct {
		name string
		a    chromedp.Action[chromedp.Void]
	}{
		{"open the page", chromedp.Navigate(s.url + "/")},
		{"see the login form", chromedp.WaitVisible(`#login`)},
		{"type alice's token", chromedp.SendKeys(`#token`, alice.token)},
		{"press log in", chromedp.Click(`#login-btn`)},
		{"see who is logged in", chromedp.WaitVisible(`#who`)},
		{"SSE connected", chromedp.WaitVisible(`#conn.on`)},
		{"list shows the archived workspace", chromedp.WaitVisible(`tr[data-name="archived-demo"] .status.PENDING`)},
		// Mark the document: a reload would lose this property.
		{"mark the document", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[string](`window.__noReload = "same-document"`)(ctx, tg)
			return err
		})},
		{"type a name", chromedp.SendKeys(`#name`, "demo")},
		{"press create", chromedp.Click(`#create-btn`)},
		{"see it STANDBY", chromedp.WaitVisible(row + ` .status.STANDBY`)},
		// Clicked from inside the page: the row is re-rendered on every SSE event, so a
		// node id looked up by chromedp can be gone by the time it clicks it.
		{"press up", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`(() => { document.querySelector(`+strconv.Quote(row+` button[data-action="up"]`)+`).click(); return true })()`)(ctx, tg)
			return err
		})},
		{"see it RUNNING", chromedp.WaitVisible(row + ` .status.RUNNING`)},
		{"see its app's open link", chromedp.WaitVisible(row + ` a.open-app[data-app="main"]`)},
	}
	for _, st := range steps {
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := chromedp.Run(sctx, st.a)
		scancel()
		if err != nil {
			t.Logf("browser step %q failed: %v", st.name, err)
			ws, _ := s.st.List(t.Context())
			for _, w := range ws {
				t.Logf("store: %s %s observed=%s desired=%s op=%s err=%+v", w.ID, w.Name, w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorInfo)
			}
			hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
			html, herr := chromedp.Run(hctx, chromedp.Evaluate[string](`String(window.__events) + " " + location.href + " " + document.documentElement.outerHTML.length + " " + document.getElementById("rows").outerHTML`))
			hcancel()
			t.Logf("debug err %v", herr)
			t.Fatalf("browser step %q: %v\npage: %s", st.name, err, html)
		}
	}
	status, err := chromedp.Run(ctx, chromedp.Text(row+` .status`))
	if err != nil {
		t.Fatal(err)
	}
	marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__noReload || "reloaded"`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(status) != "RUNNING" || marker != "same-document" {
		t.Fatalf("status %q, document %q; want RUNNING in the same document", status, marker)
	}
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(row+` a.open-app`)+`).href`))
	if err != nil || href != "http://demo--alice.localhost/" {
		t.Fatalf("the open link goes to %q (%v), want the app's URL", href, err)
	}
	who, err := chromedp.Run(ctx, chromedp.Text(`#who`))
	if err != nil || strings.TrimSpace(who) != "alice" {
		t.Fatalf("#who = %q, %v; want alice", who, err)
	}
	names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr[data-name]")].map(tr => tr.dataset.name).sort()`))
	if err != nil || strings.Join(names, ",") != "archived-demo,demo" {
		t.Fatalf("alice's page lists %v (%v); want archived-demo and demo only", names, err)
	}
	browser.Screenshot(t, ctx, "ws-page.png")

	// Another origin's page posts with alice's cookie: refused, nothing made.
	if _, err := chromedp.Run(ctx, chromedp.Navigate(evil.URL+"/")); err != nil {
		t.Fatal(err)
	}
	waitCtx, waitCancel := context.WithTimeout(ctx, 20*time.Second)
	_, err = chromedp.Run(waitCtx, chromedp.Poll[bool](`document.title === "sent"`))
	waitCancel()
	if err != nil {
		t.Fatalf("the cross-site page never sent its request: %v", err)
	}
	if _, err := s.st.Lookup(t.Context(), "csrf", "alice"); err == nil {
		t.Fatal("a cross-site POST with alice's cookie created a workspace")
	}
	refused := false
	for _, e := range auditRows(t, s) {
		refused = refused || e.Action == "workspace.create" && e.Status == http.StatusForbidden
	}
	if !refused {
		t.Fatal("the cross-site POST left no 403 in the audit log")
	}

	// Log out: the page shows the login form, and the cookie is dead.
	for _, st := range []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(s.url + "/"), chromedp.WaitVisible(`#logout`), chromedp.Click(`#logout`), chromedp.WaitVisible(`#login`),
	} {
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := chromedp.Run(sctx, st)
		scancel()
		if err != nil {
			t.Fatalf("log out: %v", err)
		}
	}
	code, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/v1/workspaces").then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || code != http.StatusUnauthorized {
		t.Fatalf("after logout GET /v1/workspaces = %d, %v; want 401", code, err)
	}
}
