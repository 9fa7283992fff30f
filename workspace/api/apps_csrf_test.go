package api_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace/api"
)

// sessionRequest sends method path to the API's origin with c's page
// session cookie and the given headers; it returns the status, the
// Access-Control-Allow-Origin answered and the body.
func (ra *recordingApps) sessionRequest(t *testing.T, c *http.Client, method, path, ctype, body string, hdr map[string]string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, ra.apiOrigin()+path, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), string(b)
}

// A request carrying the page's session cookie that the browser marks as
// coming from another origin (an app host's page, same-site with the API
// when apps live under its domain, or any other site) changes nothing:
// creating a workspace (JSON, form or text/plain body) and logging out are
// refused with 403; a GET is answered without any CORS header, so no page
// of another origin can read it. The API's own page still can.
func TestSessionRefusedFromAnotherOrigin(t *testing.T) {
	ra := newRecordingApps(t, api.APIConfig{}, "web")
	c := ra.browser(t)
	ra.login(t, c, ra.alice)
	// The API's own page, and a client that is no browser (no Origin, no
	// Sec-Fetch-Site), keep working with the cookie.
	own := map[string]string{"Origin": ra.apiOrigin(), "Sec-Fetch-Site": "same-origin"}
	if code, _, body := ra.sessionRequest(t, c, "POST", "/v1/workspaces", "application/json", `{"name":"mine"}`, own); code != http.StatusCreated {
		t.Errorf("create from the API's own page: %d %s, want 201", code, body)
	}
	if code, _, body := ra.sessionRequest(t, c, "POST", "/v1/workspaces", "application/json", `{"name":"mine2"}`, nil); code != http.StatusCreated {
		t.Errorf("create without Origin: %d %s, want 201", code, body)
	}
	create := []struct{ ctype, body string }{
		{"application/json", `{"name":"evil"}`},
		{"application/x-www-form-urlencoded", "name=evil"},
		{"text/plain", `{"name":"evil"}`},
	}
	from := []map[string]string{
		{"Origin": ra.url("web"), "Sec-Fetch-Site": "same-site"},
		{"Origin": ra.url("web")}, // a browser without Sec-Fetch-Site
		{"Sec-Fetch-Site": "same-site"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
		{"Origin": "null"},
	}
	for _, hdr := range from {
		for _, cr := range create {
			if code, _, body := ra.sessionRequest(t, c, "POST", "/v1/workspaces", cr.ctype, cr.body, hdr); code != http.StatusForbidden {
				t.Errorf("create (%s) from %v: %d %s, want 403", cr.ctype, hdr, code, body)
			}
		}
		if code, acao, body := ra.sessionRequest(t, c, "GET", "/v1/workspaces", "", "", hdr); code == http.StatusOK && acao != "" {
			t.Errorf("GET from %v answered Access-Control-Allow-Origin %q: %s", hdr, acao, body)
		}
		if code, _, _ := ra.sessionRequest(t, c, "POST", "/v1/session/logout", "", "", hdr); code != http.StatusForbidden {
			t.Errorf("logout from %v: %d, want 403", hdr, code)
		}
	}
	code, acao, _ := ra.sessionRequest(t, c, "OPTIONS", "/v1/workspaces", "", "",
		map[string]string{"Origin": ra.url("web"), "Access-Control-Request-Method": "POST"})
	if acao != "" {
		t.Errorf("preflight from an app host: %d, Access-Control-Allow-Origin %q", code, acao)
	}
	for _, name := range []string{"evil", "mine", "mine2"} {
		_, err := ra.env.St.Lookup(t.Context(), name, "alice")
		if created := err == nil; created != strings.HasPrefix(name, "mine") {
			t.Errorf("workspace %s created: %v (%v)", name, created, err)
		}
	}
}

// Under TLS the app host's cookie is __Host-gantry_app (Secure, Path=/,
// no Domain: a browser takes it from that host only, so no other app's
// page can plant one); the app host then takes only that name, the proxy
// strips it from what the app sees, and an app's own Set-Cookie of that
// name never reaches the browser.
func TestAppCookieUnderTLS(t *testing.T) {
	ra := newRecordingApps(t, api.APIConfig{SecureCookies: true}, "web")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(u, cookie string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", u, nil)
		pu, _ := url.Parse(u)
		req.URL.Host, req.Host = strings.TrimPrefix(ra.env.Srv.URL, "http://"), pu.Host
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp, err := c.Post(ra.env.Srv.URL+"/v1/session", "application/json", strings.NewReader(`{"token":"`+ra.alice+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	session := strings.SplitN(resp.Header.Get("Set-Cookie"), ";", 2)[0]
	q := url.Values{"host": {"web--alice.localhost:" + ra.port}, "return": {"/x"}}
	auth := do(ra.apiOrigin()+"/v1/apps/authorize?"+q.Encode(), session)
	cb := auth.Header.Get("Location")
	if auth.StatusCode != http.StatusFound || !strings.Contains(cb, "/.gantry/callback?code=") {
		t.Fatalf("authorize: %s %q", auth.Status, cb)
	}
	got := do(strings.Replace(cb, "https://", "http://", 1), "")
	set := got.Header.Get("Set-Cookie")
	lower := strings.ToLower(set)
	if !strings.HasPrefix(set, api.AppCookieSecure+"=") || !strings.Contains(lower, "; secure") || !strings.Contains(lower, "path=/") ||
		strings.Contains(lower, "domain") || !strings.Contains(lower, "httponly") {
		t.Fatalf("callback's cookie %q: want __Host-gantry_app, Secure, Path=/, HttpOnly, no Domain", set)
	}
	secret := strings.TrimPrefix(strings.SplitN(set, ";", 2)[0], api.AppCookieSecure+"=")
	if r := do(ra.url("web")+"/x", api.AppCookie+"="+secret); r.StatusCode != http.StatusFound {
		t.Errorf("the secret under the plain name: %s, want a redirect to the login", r.Status)
	}
	r := do(ra.url("web")+"/x", api.AppCookieSecure+"="+secret+"; other=1")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("with __Host-gantry_app: %s", r.Status)
	}
	if sc := r.Header.Values("Set-Cookie"); len(sc) != 1 || !strings.HasPrefix(sc[0], "webcookie=") {
		t.Errorf("the app's Set-Cookie reaching the browser: %q, want webcookie only", sc)
	}
	if line := ra.apps["web"].anySaw("gantry"); line != "" || ra.apps["web"].anySaw(secret) != "" {
		t.Errorf("the app saw a gantry cookie: %q", line)
	}
}
