package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/internal/testutil/browser"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
)

// plantings are what a page of app A tries, with document.cookie, to set
// for app B or the whole apps domain (localhost).
var plantings = []string{
	"gantry_app=planted1; domain=localhost; path=/",
	"gantry_app=planted2; domain=.localhost; path=/",
	"gantry_app=planted3; domain=b--alice.localhost; path=/",
	"gantry_app=planted4; domain=localhost; path=/deep",
	"__Host-gantry_app=planted5; path=/; secure",
	"tossed=planted6; domain=localhost; path=/",
	"bcookie=planted7; domain=localhost; path=/",
	"gantry_session=planted8; domain=localhost; path=/",
}

// apiFromPage is what a page of app A tries against the API's origin
// (api) with the user's credentials: a GET whose body it would read, a
// JSON POST (preflighted), a text/plain POST (not preflighted, no-cors)
// creating a workspace, and two form POSTs into a frame.
const apiFromPage = `(async (api) => {
	const out = [];
	try { const r = await fetch(api + "/v1/workspaces", {credentials: "include"}); out.push("get read " + r.status + " " + await r.text()); }
	catch (e) { out.push("get refused"); }
	try { const r = await fetch(api + "/v1/workspaces", {method: "POST", credentials: "include", headers: {"Content-Type": "application/json"}, body: '{"name":"evil1"}'}); out.push("post read " + r.status); }
	catch (e) { out.push("post refused"); }
	try { const r = await fetch(api + "/v1/workspaces", {method: "POST", credentials: "include", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: '{"name":"evil2"}'}); out.push("post no-cors " + r.type); }
	catch (e) { out.push("post no-cors refused"); }
	const frame = document.createElement("iframe");
	frame.name = "sink";
	document.body.appendChild(frame);
	for (const [enctype, name, value] of [["text/plain", '{"name":"evil3","x":"', '"}'], ["application/x-www-form-urlencoded", "name", "evil4"]]) {
		const f = document.createElement("form");
		f.method = "POST"; f.action = api + "/v1/workspaces"; f.enctype = enctype; f.target = "sink";
		const i = document.createElement("input");
		i.type = "hidden"; i.name = name; i.value = value;
		f.appendChild(i);
		document.body.appendChild(f);
		const loaded = new Promise((ok) => frame.addEventListener("load", ok, {once: true}));
		f.submit();
		await loaded;
		out.push("form " + enctype + " sent");
	}
	return out.join("\n");
})`

// Isolation between app hosts and the API, in Chromium, with alice logged
// in to apps a and b: a's page reads neither gantry_app (HttpOnly) nor b's
// cookies; what it plants with document.cookie for b or the apps domain
// never reaches b's app, and b's session still works; its calls to the
// API's /v1 with the user's credentials create nothing and read nothing;
// and neither app ever receives gantry_session, gantry_app or an
// Authorization header (a's page sends one to its own app).
func TestAppIsolationInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	ra := newRecordingApps(t, api.APIConfig{}, "a", "b")
	ctx := browser.Start(t, t.Context(), 800, 600)
	ra.chromeLogin(t, ctx, ra.url("b")+"/", "app b at /")
	ra.chromeOpen(t, ctx, ra.url("a")+"/", "app a at /") // the page session gives a's code, no form
	cookies := js[string](t, ctx, `document.cookie`)
	if !strings.Contains(cookies, "acookie=a-secret") || strings.Contains(cookies, "gantry") || strings.Contains(cookies, "bcookie") {
		t.Errorf("a's page reads cookies %q: want its own acookie only", cookies)
	}
	js[bool](t, ctx, `(() => { for (const c of `+jsStrings(plantings)+`) document.cookie = c; return true; })()`)
	js[int](t, ctx, `fetch("/own", {headers: {"Authorization": "Bearer planted9"}}).then(r => r.status)`)
	got := js[string](t, ctx, apiFromPage+`(`+jsString(ra.apiOrigin())+`)`)
	t.Logf("a's page against the API:\n%s", got)
	if !strings.Contains(got, "get refused") || strings.Contains(got, "get read") || strings.Contains(got, "post read") || strings.Count(got, " sent") != 2 {
		t.Errorf("a's page against the API:\n%s\nwant the GET unreadable, the preflighted POST refused, both forms sent", got)
	}
	for _, name := range []string{"evil1", "evil2", "evil3", "evil4"} {
		if _, err := ra.env.St.Lookup(t.Context(), name, "alice"); err == nil {
			t.Errorf("a's page created workspace %s", name)
		}
	}
	ra.chromeOpen(t, ctx, ra.url("b")+"/deep/after", "app b at /deep/after") // b's session holds
	for name, app := range ra.apps {
		for _, leak := range []string{"planted", "gantry", "Authorization"} {
			if line := app.anySaw(leak); line != "" {
				t.Errorf("app %s received %q", name, line)
			}
		}
	}
	ra.logAudit(t)
}

// chromeLogin opens u in ctx's tab, logs in with alice's token on the
// login form it lands on, and waits for the app's page saying want.
func (ra *recordingApps) chromeLogin(t *testing.T, ctx context.Context, u, want string) {
	t.Helper()
	do(t, ctx, "open "+u, chromedp.Navigate(u))
	do(t, ctx, "the login form", chromedp.WaitVisible(`#app-token`))
	do(t, ctx, "type the token", chromedp.SendKeys(`#app-token`, ra.alice))
	do(t, ctx, "log in", chromedp.Click(`#app-login-submit`))
	ra.waitPage(t, ctx, u, want)
}

// chromeOpen opens u, which must show the app's page saying want.
func (ra *recordingApps) chromeOpen(t *testing.T, ctx context.Context, u, want string) {
	t.Helper()
	do(t, ctx, "open "+u, chromedp.Navigate(u))
	ra.waitPage(t, ctx, u, want)
}

func (ra *recordingApps) waitPage(t *testing.T, ctx context.Context, u, want string) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, want, func() (bool, string) {
		got, err := peek[string](ctx, `location.href + " " + (document.body ? document.body.innerText : "")`)
		return err == nil && got == u+" "+want, got
	})
}

// logAudit logs the audit rows of workspace creation: the page's attempts
// that reached the API, and how each was answered.
func (ra *recordingApps) logAudit(t *testing.T) {
	es, err := ra.env.St.Accounts().Audit(t.Context(), auth.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Action == "workspace.create" {
			t.Logf("audit: %s %d owner %q %s", e.Action, e.Status, e.Owner, e.Detail)
		}
	}
}

func jsStrings(ss []string) string {
	quoted := make([]string, len(ss))
	for i, s := range ss {
		quoted[i] = jsString(s)
	}
	return "[" + strings.Join(quoted, ",") + "]"
}

// With apps under the API's registrable domain (API at apps.example.com,
// apps at {app}.apps.example.com: same-site, so the browser sends the
// API's SameSite=Strict session cookie along with a page of app a's
// requests to the API), a's page still creates nothing and reads
// nothing: the API refuses the page session for another origin.
func TestAppSameSiteInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	ra := newRecordingApps(t, api.APIConfig{AppsURL: "http://apps.example.com"}, "a")
	ctx := browser.Start(t, t.Context(), 800, 600, chromedp.Flag("host-resolver-rules", "MAP *.example.com 127.0.0.1"))
	ra.chromeLogin(t, ctx, ra.url("a")+"/", "app a at /")
	got := js[string](t, ctx, apiFromPage+`(`+jsString(ra.apiOrigin())+`)`)
	t.Logf("a's page against the API:\n%s", got)
	if strings.Contains(got, "get read") || strings.Contains(got, "post read") {
		t.Errorf("a's page read an answer of the API:\n%s", got)
	}
	for _, name := range []string{"evil1", "evil2", "evil3", "evil4"} {
		if _, err := ra.env.St.Lookup(t.Context(), name, "alice"); err == nil {
			t.Errorf("a's page created workspace %s", name)
		}
	}
	withSession := 0
	for _, h := range ra.apiHits() {
		if h.method == "POST" && h.path == "/v1/workspaces" {
			t.Logf("POST /v1/workspaces from a's page: session cookie %v, Sec-Fetch-Site %q, Origin %q", h.session, h.secFetchSite, h.origin)
			if h.session {
				withSession++
			}
		}
	}
	if withSession == 0 {
		t.Errorf("no POST from a's page carried the session cookie: the same-site case was not tried")
	}
	ra.logAudit(t)
}
