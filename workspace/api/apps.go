package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
)

// An origin per workspace app. With APIConfig.AppsURL set (its host name
// is the apps domain D), a request whose Host is {label}.D[:port] is the
// app of one workspace, proxied to its PORT at / (no prefix), HTTP and
// WebSocket, waking it like /w/{id}/. The label is {name}--{owner}: a DNS
// label, so only a workspace whose name and owner are both a–z, 0–9 and
// '-' (the owner without "--"), 63 characters together, has an app URL
// (Workspace.URL, "" otherwise); the owner is after the label's last
// "--". A workspace's other apps are at {app}--{name}--{owner}, and each
// app has a share level (apps_share.go: how a label resolves, who may
// open an app).
//
// The login never shows the API's credentials to the app's origin: an app
// request (but a public app's) without a valid gantry_app cookie is sent (302) to the API's
// origin, GET /v1/apps/authorize?host=H&return=PATH, which, for a page
// session the app's share level admits (the workspace's owner or an admin;
// any user's for a shared app; after a login form if there is none), issues a one-time code — random, 60 s, single use,
// bound to H — and sends the browser to H/.gantry/callback?code=…; there
// the code becomes the gantry_app cookie: host-only (no Domain), HttpOnly,
// SameSite=Lax, Secure under TLS, valid on H only, standing for the page
// session it came from (logout, revocation or expiry of that ends it,
// open streams included, within RecheckEvery). The proxy strips
// gantry_session, gantry_app and Authorization before the app sees the
// request, and drops any Set-Cookie of the app's that names a Domain or a
// gantry_ cookie. Codes and app sessions are kept in this process's memory
// (only their hashes): with several replicas behind one name, the
// balancer must keep a browser on one replica (or an app logs in again).
// The API's origin is APIConfig.APIURL, or by default the apps domain
// itself (scheme of AppsURL, port of the request).

// AppCookie is the cookie of an app host's session.
const AppCookie = "gantry_app"

// appCallback is where an app host turns a code into its cookie.
const appCallback = "/.gantry/callback"

const (
	appCodeTTL = 60 * time.Second
	maxAppKeys = 100_000 // codes or sessions kept; more are refused
)

// appGrant is what a code or an app cookie stands for: a page session
// (its id and principal), on one app host, until expires.
type appGrant struct {
	principal auth.Principal
	host      string
	ret       string // a code's return path
	expires   time.Time
}

// appKeys keeps codes and app sessions by the hash of their secret.
type appKeys struct {
	mu       sync.Mutex
	codes    map[string]appGrant
	sessions map[string]appGrant
}

func (k *appKeys) put(m *map[string]appGrant, hash string, g appGrant, now time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if *m == nil {
		*m = map[string]appGrant{}
	}
	if len(*m) >= maxAppKeys {
		for h, old := range *m {
			if !now.Before(old.expires) {
				delete(*m, h)
			}
		}
		if len(*m) >= maxAppKeys {
			return fmt.Errorf("%w: too many app logins in flight", workspace.ErrConflict)
		}
	}
	(*m)[hash] = g
	return nil
}

// takeCode returns the grant of code and forgets it (single use).
func (k *appKeys) takeCode(code string) (appGrant, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	g, ok := k.codes[auth.HashSecret(code)]
	delete(k.codes, auth.HashSecret(code))
	return g, ok
}

func (k *appKeys) session(secret string) (appGrant, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	g, ok := k.sessions[auth.HashSecret(secret)]
	return g, ok
}

func (k *appKeys) drop(secret string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.sessions, auth.HashSecret(secret))
}

func randomSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// appsDomain is the apps domain ("" = no app hosts).
func (a *API) appsDomain() string {
	u, err := url.Parse(a.appsURL())
	if a.appsURL() == "" || err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

func (a *API) appsScheme() string {
	if u, err := url.Parse(a.appsURL()); err == nil && u.Scheme == "https" {
		return "https"
	}
	return "http"
}

// AppLabel is the DNS label of the app of workspace name of owner, "" if
// it has none (see above).
func AppLabel(name, owner string) string {
	label := name + "--" + owner
	if len(label) > 63 || strings.Contains(owner, "--") || strings.HasSuffix(owner, "-") {
		return ""
	}
	for i := 0; i < len(label); i++ {
		if c := label[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return ""
		}
	}
	return label
}

// appURL is workspace w's default app's URL, "" if none.
func (a *API) appURL(w workspace.Workspace) string {
	return a.appURLOf(w, workspace.DefaultApp)
}

// appURLOf is the URL of w's app named app (apps_share.go: its label), ""
// if none.
func (a *API) appURLOf(w workspace.Workspace, app string) string {
	label := AppLabel(w.Name, w.Owner)
	if label != "" && app != workspace.DefaultApp {
		if label = app + "--" + label; len(label) > 63 {
			label = ""
		}
	}
	if label == "" || a.appsDomain() == "" {
		return ""
	}
	u, _ := url.Parse(a.appsURL())
	return u.Scheme + "://" + label + "." + u.Host + "/"
}

// appOf parses r's Host: an app host under the apps domain, whose label
// ends in --{owner} (apps_share.go resolves the rest).
func (a *API) appOf(r *http.Request) (appHost, bool) {
	return parseAppHost(r.Host, a.appsDomain())
}

// apiOrigin is the API's origin as seen from an app host's request.
func (a *API) apiOrigin(r *http.Request) string {
	if a.cfg.APIURL != "" {
		return strings.TrimSuffix(a.cfg.APIURL, "/")
	}
	host := a.appsDomain()
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		host = net.JoinHostPort(host, port)
	}
	return a.appsScheme() + "://" + host
}

// serveApp serves r if its Host is an app host, and reports whether it
// was: a public app at once, another after the app login, for a principal
// its share level admits (apps_share.go).
func (a *API) serveApp(w http.ResponseWriter, r *http.Request) bool {
	h, ok := a.appOf(r)
	if !ok {
		return false
	}
	note := &reqNote{}
	r = r.WithContext(context.WithValue(r.Context(), noteKey{}, note))
	rec := &recorder{ResponseWriter: w}
	defer a.audit(r, rec, note)
	if r.URL.Path == appCallback {
		a.appCallback(rec, r, h.host)
		return true
	}
	ws, app, err := a.resolveApp(r.Context(), h)
	if err != nil && !errors.Is(err, workspace.ErrNotFound) {
		a.fail(rec, r, err)
		return true
	}
	if err == nil && app.Share == workspace.SharePublic {
		a.servePublic(rec, r, h, ws, app)
		return true
	}
	secret, g, ok := a.appSession(r, h.host)
	if !ok {
		a.toAuthorize(rec, r, h.host)
		return true
	}
	note.principal = g.principal
	if err == nil && !mayOpen(g.principal, ws, app) {
		err = fmt.Errorf("%w: app of host %s", workspace.ErrNotFound, h.host)
	}
	if err != nil {
		a.fail(rec, r, err)
		return true
	}
	note.workspace = ws.ID
	ctx := auth.WithPrincipal(r.Context(), g.principal)
	ctx = auth.WithRecheck(ctx, func() error {
		if err := a.appAlive(ctx, secret, g); err != nil {
			return err
		}
		return a.stillOpen(ctx, h, ws.ID, g.principal)
	})
	a.forward(rec, r.WithContext(ctx), ws, "", app.Port)
	return true
}

// appSession is r's valid app session on host: of the gantry_app cookies
// r carries (a page on another app host can plant one for the whole apps
// domain with a longer path), the first valid here.
func (a *API) appSession(r *http.Request, host string) (secret string, g appGrant, ok bool) {
	for _, c := range r.CookiesNamed(a.appCookie()) {
		if g, ok = a.apps.session(c.Value); ok && g.host == host && a.appAlive(r.Context(), c.Value, g) == nil {
			return c.Value, g, true
		}
	}
	return "", appGrant{}, false
}

// toAuthorize sends a browser without an app session to the API's origin.
func (a *API) toAuthorize(w http.ResponseWriter, r *http.Request, host string) {
	q := url.Values{"host": {host}, "return": {localPath(r.URL.RequestURI())}}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, a.apiOrigin(r)+"/v1/apps/authorize?"+q.Encode(), http.StatusFound)
}

// localPath is p if it is a path on the same host, "/" otherwise (a
// browser drops tabs and newlines from a URL, and reads \\ as /).
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, '\\') {
		return "/"
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] == 0x7f {
			return "/"
		}
	}
	if strings.HasPrefix(p, "//") {
		return "/"
	}
	return p
}

// appAlive reports whether an app session still holds: known, not
// expired, and its page session and token still valid. A store failure is
// not an end (nil; the next check decides) once the session was admitted.
func (a *API) appAlive(ctx context.Context, secret string, g appGrant) error {
	now := a.clock.Now()
	if _, ok := a.apps.session(secret); !ok || !now.Before(g.expires) {
		a.apps.drop(secret)
		return auth.ErrNoSession
	}
	s, found, err := a.accounts.Session(ctx, g.principal.SessionID)
	if err != nil {
		return nil
	}
	ended := !found || !now.Before(s.ExpiresAt)
	if !ended {
		t, found, err := a.accounts.Token(ctx, s.TokenID)
		if err != nil {
			return nil
		}
		ended = !found || t.Usable(now) != nil
	}
	if ended {
		a.apps.drop(secret)
		return auth.ErrNoSession
	}
	return nil
}
