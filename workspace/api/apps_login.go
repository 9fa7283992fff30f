package api

import (
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
)

// The API's side of an app's login (apps.go): GET /v1/apps/authorize
// issues a one-time code for an app host to a page session allowed there
// (a login form first if there is none), and the app host's
// /.gantry/callback turns the code into its own cookie.

const authorizePath = "/v1/apps/authorize"

// authorize: ?host=H&return=PATH. Public in the front door's terms: it
// authenticates the page session itself, answering a login form (which
// comes back here) rather than 401.
func (a *API) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	h, ok := parseAppHost(q.Get("host"), a.appsDomain())
	if !ok || h.host != q.Get("host") || port(h.host) != port(r.Host) {
		// Another port of the apps domain's hosts is not this server's:
		// whoever listens there would receive the code.
		a.fail(w, r, fmt.Errorf("%w: host %q is no workspace app's on this server", workspace.ErrBadInput, q.Get("host")))
		return
	}
	host := h.host
	ret := localPath(q.Get("return"))
	w.Header().Set("Cache-Control", "no-store")
	p, err := a.authn.Authenticate(r)
	if err != nil || p.SessionID == "" {
		a.loginForm(w, r)
		return
	}
	note := noteOf(r)
	note.principal = p
	ws, app, err := a.resolveApp(r.Context(), h)
	if err == nil && !mayOpen(p, ws, app) { // apps_share.go: the share level
		err = fmt.Errorf("%w: no app at host %s", workspace.ErrNotFound, host)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	code, err := randomSecret()
	now := a.clock.Now()
	if err == nil {
		err = a.apps.put(&a.apps.codes, auth.HashSecret(code), appGrant{principal: p, host: host, ret: ret, expires: now.Add(appCodeTTL)}, now)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	http.Redirect(w, r, a.appsScheme()+"://"+host+appCallback+"?"+url.Values{"code": {code}}.Encode(), http.StatusFound)
}

// port is host's port, "" if it names none.
func port(host string) string {
	_, p, err := net.SplitHostPort(host)
	if err != nil {
		return ""
	}
	return p
}

// loginForm asks for a token; the login (accounts.go) comes back to next.
func (a *API) loginForm(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprintf(w, `<!doctype html><title>gantry login</title><form id="app-login" method="post" action="/v1/session">`+
		`<input type="hidden" name="next" value="%s"><label>Token <input type="password" name="token" id="app-token" autocomplete="off"></label>`+
		`<button type="submit" id="app-login-submit">Log in</button></form>`+"\n", html.EscapeString(r.URL.RequestURI()))
}

// loginNext is where a form login goes: next if it is an app's
// authorization, the page otherwise.
func loginNext(r *http.Request) string {
	if next := localPath(r.PostForm.Get("next")); strings.HasPrefix(next, authorizePath+"?") {
		return next
	}
	return "/"
}

// appCallback turns a code for host into host's cookie (apps.go).
func (a *API) appCallback(w http.ResponseWriter, r *http.Request, host string) {
	w.Header().Set("Cache-Control", "no-store")
	g, ok := a.apps.takeCode(r.URL.Query().Get("code"))
	now := a.clock.Now()
	if !ok || g.host != host || !now.Before(g.expires) {
		a.fail(w, r, fmt.Errorf("%w: this app login code is unknown, used, expired or for another host", auth.ErrNoSession))
		return
	}
	noteOf(r).principal = g.principal
	secret, err := randomSecret()
	ret := g.ret
	g.ret, g.expires = "", now.Add(a.cfg.SessionTTL)
	if err == nil {
		err = a.apps.put(&a.apps.sessions, auth.HashSecret(secret), g, now)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: a.appCookie(), Value: secret, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: a.secureApps(), MaxAge: int(a.cfg.SessionTTL.Seconds())})
	http.Redirect(w, r, localPath(ret), http.StatusFound)
}

// AppCookieSecure is the app hosts' cookie under TLS: a browser takes a
// __Host- cookie only from the host itself, Secure, with Path=/ and no
// Domain, so no other host (another app's page) can plant one for it.
const AppCookieSecure = "__Host-" + AppCookie

// appCookie is the name of the app hosts' cookie on this server.
func (a *API) appCookie() string {
	if a.secureApps() {
		return AppCookieSecure
	}
	return AppCookie
}

// secureApps reports whether browsers reach app hosts over TLS (the
// server's, or a proxy's in front of it).
func (a *API) secureApps() bool { return a.cfg.SecureCookies || a.appsScheme() == "https" }
