package api_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/internal/testutil/browser"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// jupyterCmd runs Debian's Jupyter Notebook (6.x) on the workspace's PORT,
// its own login off (gantry's app login stands in front of it), its XSRF
// and Origin checks on. HOME and the notebook directory are the
// workspace's volume (the process provider's working directory).
const jupyterCmd = `exec jupyter-notebook --no-browser --ip=127.0.0.1 --port="$PORT" --NotebookApp.token= --NotebookApp.password=`

// jupyterEnv is `ws serve` with alice's workspace "nb" RUNNING Jupyter.
type jupyterEnv struct {
	t                  *testing.T
	s                  *wstest.Serve
	url                string // the workspace's url, as `ws get --json` gives it
	alice, alice2, bob string // tokens
}

func startJupyter(t *testing.T) *jupyterEnv {
	if testing.Short() {
		t.Skip("runs Jupyter Notebook in a workspace and drives it from a browser")
	}
	testutil.EnsureCommand(t, "jupyter", "jupyter-notebook")
	e := &jupyterEnv{t: t, s: wstest.StartServe(t, "", t.TempDir())}
	token := func(owner string) string { return strings.TrimSpace(e.s.CLI("token", "create", "--owner", owner)) }
	e.alice, e.alice2, e.bob = token("alice"), token("alice"), token("bob")
	id := strings.TrimSpace(e.gantry(e.alice, "create", "nb", "--desired", "RUNNING", "--http", "--cmd", jupyterCmd))
	e.s.CLI("wait", id, "RUNNING", "--timeout", "90s")
	var row struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(e.gantry(e.alice, "get", "nb", "--json")), &row); err != nil || row.URL == "" {
		t.Fatalf("ws get nb --json: url %q, %v", row.URL, err)
	}
	e.url = row.URL
	return e
}

func (e *jupyterEnv) gantry(token string, args ...string) string {
	cmd := exec.Command(e.s.Bin, append([]string{"ws", "--server", e.s.URL}, args...)...)
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("gantry %v: %v\n%s\nserver log:\n%s", args, err, out, wstest.Tail(e.s.Log.String(), 3000))
	}
	return string(out)
}

// do runs a browser action, failing with the page it was on.
func do[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		page, _ := peek[string](ctx, `location.href + "\n" + document.documentElement.outerHTML.slice(0, 3000)`)
		t.Fatalf("browser: %s: %v\npage: %s", what, err, page)
	}
	return v
}

// newTab opens another tab of parent's browser (in a browser context of
// its own with chromedp.WithNewBrowserContext), closed with the test. Its
// first action runs on its own context: a tab opened under a timeout's
// context would close with it.
func newTab(t *testing.T, parent context.Context, opts ...chromedp.ContextOption) context.Context {
	ctx, cancel := chromedp.NewContext(parent, opts...)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return ctx
}

// peek evaluates expr in ctx's tab for a poll: its error, not a failure,
// when the page is between documents.
func peek[T any](ctx context.Context, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// js evaluates expr (awaiting a promise) in ctx's tab.
func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	return do(t, ctx, expr, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// loginAt opens u in ctx's tab, which must land on gantry's login form on
// the API's origin, and logs in with token.
func (e *jupyterEnv) loginAt(ctx context.Context, u, token string) {
	t := e.t
	t.Helper()
	do(t, ctx, "open "+u, chromedp.Navigate(u))
	do(t, ctx, "the login form", chromedp.WaitVisible(`#app-token`))
	if origin := js[string](t, ctx, `location.origin`); origin != e.apiOrigin() {
		t.Fatalf("the login form is on %s, want the API's origin", origin)
	}
	do(t, ctx, "type the token", chromedp.SendKeys(`#app-token`, token))
	do(t, ctx, "log in", chromedp.Click(`#app-login-submit`))
}

// apiOrigin is the API's origin as the app login uses it: the apps
// domain (localhost) on the server's port.
func (e *jupyterEnv) apiOrigin() string {
	return "http://localhost:" + e.s.URL[strings.LastIndex(e.s.URL, ":")+1:]
}

// app is the app host's origin.
func (e *jupyterEnv) app() string { return strings.TrimSuffix(e.url, "/") }

// Jupyter Notebook in a workspace on the process provider, in Chromium:
// its url opens gantry's login; bob's token ends in a refusal; alice's
// shows the notebook tree at / of the app's own origin; a new notebook
// runs print(6*7) and shows 42 (its kernel over a WebSocket through the
// app origin, whose Origin the proxy presents as the app's own). Logging
// out of gantry's page, and revoking the token, each end the app within
// 5 s: the open tab's next request goes back to the login, and the
// kernel's WebSocket closes.
func TestJupyterInChromium(t *testing.T) {
	began := time.Now()
	e := startJupyter(t)
	t.Logf("jupyter workspace RUNNING after %s", time.Since(began).Round(time.Millisecond))
	ctx := browser.Start(t, t.Context(), 1200, 800)
	e.bobIsRefused(ctx)
	e.loginAt(ctx, e.url, e.alice)
	path := e.openNotebook(ctx)
	t.Logf("notebook ran print(6*7) after %s", time.Since(began).Round(time.Millisecond))

	// Log out on gantry's page, in another tab of the same browser.
	e.watchKernel(ctx)
	page := newTab(t, ctx)
	do(t, page, "gantry's page", chromedp.Navigate(e.apiOrigin()+"/"))
	do(t, page, "the logout button", chromedp.WaitVisible(`#logout`))
	do(t, page, "log out", chromedp.Click(`#logout`))
	e.appEnds(ctx, "logout", time.Now())

	// Log in again (another token of alice's), then revoke that token.
	e.loginAt(ctx, e.url+"notebooks/"+url.PathEscape(path), e.alice2)
	e.kernelRuns(ctx, "print(6*7)", "42")
	e.watchKernel(ctx)
	id, err := auth.ParseSecret(auth.TokenPrefix, e.alice2)
	if err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	e.s.CLI("token", "revoke", id) // returns once the revocation is stored
	t.Logf("ws token revoke took %s", time.Since(asked).Round(time.Millisecond))
	e.appEnds(ctx, "revocation", time.Now())
	t.Logf("whole test %s", time.Since(began).Round(time.Millisecond))
}

// bobIsRefused logs in with bob's token in a browser context of its own:
// the login ends in a refusal on the API's origin, never the notebook.
func (e *jupyterEnv) bobIsRefused(parent context.Context) {
	t := e.t
	ctx := newTab(t, parent, chromedp.WithNewBrowserContext())
	e.loginAt(ctx, e.url, e.bob)
	var page string
	testutil.WaitFor(t, 20*time.Second, "bob's login to end in a refusal", func() (bool, string) {
		got, err := peek[string](ctx, `location.href + "\n" + document.body.innerText`)
		page = got
		return err == nil && strings.Contains(got, "/v1/apps/authorize?") && strings.Contains(got, "not found"), got
	})
	if strings.HasPrefix(page, e.url) || strings.Contains(page, "Jupyter") || strings.Contains(page, "notebook_list") {
		t.Fatalf("bob saw the app:\n%s", page)
	}
}

// openNotebook waits for the notebook tree on the app's origin (after the
// login), creates a Python 3 notebook through Jupyter's API (its XSRF
// token and Origin check in force), opens it and runs print(6*7). It
// returns the notebook's path.
func (e *jupyterEnv) openNotebook(ctx context.Context) string {
	t := e.t
	testutil.WaitFor(t, 30*time.Second, "the notebook tree on the app's origin", func() (bool, string) {
		got, err := peek[string](ctx, `location.href + " " + !!document.querySelector("#notebook_list")`)
		return err == nil && strings.HasPrefix(got, e.url+"tree") && strings.HasSuffix(got, " true"), got
	})
	created := js[string](t, ctx, `(async () => {
		const x = document.cookie.match("\\b_xsrf=([^;]*)\\b");
		const r = await fetch("/api/contents", {method: "POST", headers: {"X-XSRFToken": x ? x[1] : "", "Content-Type": "application/json"},
			body: JSON.stringify({type: "notebook"})});
		return r.status + " " + await r.text();
	})()`)
	status, body, _ := strings.Cut(created, " ")
	var nb struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal([]byte(body), &nb); status != "201" || err != nil || nb.Path == "" {
		t.Fatalf("create a notebook: %s", created)
	}
	do(t, ctx, "open the notebook", chromedp.Navigate(e.url+"notebooks/"+url.PathEscape(nb.Path)))
	e.kernelRuns(ctx, "print(6*7)", "42")
	return nb.Path
}

// kernelRuns waits for the notebook's kernel to connect (its WebSocket
// open), runs code in the first cell and waits for its output to be want.
func (e *jupyterEnv) kernelRuns(ctx context.Context, code, want string) {
	t := e.t
	testutil.WaitFor(t, 60*time.Second, "the kernel's WebSocket to open", func() (bool, string) {
		got, err := peek[string](ctx, `location.href + " " + String(!!(window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel &&
			Jupyter.notebook.kernel.ws && Jupyter.notebook.kernel.ws.readyState === 1 && Jupyter.notebook.kernel.is_connected()))`)
		return err == nil && strings.HasPrefix(got, e.url+"notebooks/") && strings.HasSuffix(got, " true"), got
	})
	if ws := js[string](t, ctx, `Jupyter.notebook.kernel.ws.url`); !strings.HasPrefix(ws, "ws://"+strings.TrimPrefix(e.app(), "http://")+"/api/kernels/") {
		t.Fatalf("the kernel's WebSocket is %s, want one on the app's origin", ws)
	}
	js[bool](t, ctx, `(() => { const c = Jupyter.notebook.get_cell(0); c.set_text(`+jsString(code)+`); Jupyter.notebook.select(0); c.execute(); return true; })()`)
	testutil.WaitFor(t, 30*time.Second, "the cell's output", func() (bool, string) {
		got, err := peek[string](ctx, `Array.from(document.querySelectorAll(".output_subarea")).map(n => n.innerText).join("|")`)
		return err == nil && strings.TrimSpace(got) == want, got
	})
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// watchKernel has the tab note when the kernel's WebSocket closes.
func (e *jupyterEnv) watchKernel(ctx context.Context) {
	js[bool](e.t, ctx, `(() => { window.__wsClosed = 0; Jupyter.notebook.kernel.ws.addEventListener("close", () => { window.__wsClosed = Date.now(); }); return true; })()`)
	if got := js[string](e.t, ctx, appProbe); got != "basic 200" {
		e.t.Fatalf("the app before the end: %s, want basic 200", got)
	}
}

// appProbe is a request of the open tab to the app (Jupyter's API): "basic
// 200" while the session holds, "opaqueredirect 0" once the app sends it to
// the login.
const appProbe = `fetch("/api/contents", {redirect: "manual"}).then(r => r.type + " " + r.status, e => "error " + e)`

// appEnds waits (at most 5 s from since) for the open tab's next request
// to be sent to the login and for the kernel's WebSocket to close.
func (e *jupyterEnv) appEnds(ctx context.Context, why string, since time.Time) {
	t := e.t
	testutil.WaitFor(t, 5*time.Second-time.Since(since), "the app to refuse the tab after "+why, func() (bool, string) {
		got, err := peek[string](ctx, appProbe)
		return err == nil && got == "opaqueredirect 0", got
	})
	refused := time.Since(since)
	testutil.WaitFor(t, 5*time.Second-time.Since(since), "the kernel's WebSocket to close after "+why, func() (bool, string) {
		closed, err := peek[float64](ctx, `window.__wsClosed`)
		return err == nil && closed > 0, "still open"
	})
	t.Logf("after %s: the app refused the tab in %s, the kernel's WebSocket closed in %s", why,
		refused.Round(time.Millisecond), time.Since(since).Round(time.Millisecond))
}
