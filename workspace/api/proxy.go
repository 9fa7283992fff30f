package api

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
)

// The HTTP proxy into workspaces: {server}/w/{id}/… reaches the workspace's
// PORT (HTTP and WebSocket) for a bearer token that may see the workspace
// (never for the page's session cookie: the proxy shares the API's origin,
// so a workspace's page must not run with a browser session). A workspace
// that is not running is woken: the request sets desired RUNNING (quotas
// apply; audited as workspace.wake) and answers 503 with Retry-After, a page
// that reloads itself for a browser. Proxied traffic is activity for the
// TTL manager, written at most once per ActivityEvery per workspace, for
// as long as a request (a WebSocket) is open; a proxied request or a
// followed log ends when its credential does (streams.go).
//
// What the app sees: the path as the client encoded it (a %2F stays
// encoded), X-Forwarded-For/-Host/-Proto/-Prefix set by the proxy (the
// client's X-Forwarded-*, Forwarded, X-Real-IP and X-Forwarded-Port
// dropped), no gantry token or cookie; on an app host, the app host's own
// Origin as the origin of the Host it is sent (upstreamOrigin). What the
// client sees: under /w/ the app's answer without Set-Cookie, since the
// app shares the API's origin; on an app host, without the Set-Cookie
// lines that name a Domain or a gantry cookie.

// DefaultActivityEvery is how often proxied traffic may touch a workspace.
const DefaultActivityEvery = 30 * time.Second

// proxyPrefix is where the proxy is mounted.
const proxyPrefix = "/w/"

func (a *API) proxyRoutes() []route {
	return []route{
		{"/w/{id}/{path...}", "", a.proxy},
		{"GET /v1/workspaces/{id}/logs", "", a.logs},
		{"POST /v1/workspaces/{id}/exec", "workspace.exec", a.exec},
		{"GET /v1/workspaces/{id}/ssh", "workspace.ssh", a.upgradeSSH},
		{"/w/{id}", "", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, proxyPrefix+url.PathEscape(r.PathValue("id"))+"/", http.StatusMovedPermanently)
		}},
	}
}

func (a *API) proxy(w http.ResponseWriter, r *http.Request) {
	if p, _ := auth.FromContext(r.Context()); p.SessionID != "" {
		// The proxy serves workspaces on the API's own origin: a page there
		// could use the browser's session against /v1. Until workspaces get
		// origins of their own, only API tokens (not the page's cookie) go in.
		a.fail(w, r, fmt.Errorf("%w: the workspace proxy takes an API token (Authorization: Bearer), not the page's session", errForbidden))
		return
	}
	ws, err := a.lookup(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.forward(w, r, ws, proxyPrefix+r.PathValue("id"), 0)
}

// forward proxies r to workspace ws's PORT, or its port appPort if not 0
// (waking it if it is not running): under prefix /w/{id} (the path
// without it), or, with prefix "", an app host's request (the path as it
// is; apps.go).
func (a *API) forward(w http.ResponseWriter, r *http.Request, ws workspace.Workspace, prefix string, appPort int) {
	ep, ok := a.cfg.Container.(provider.Endpointer)
	if !ok {
		a.fail(w, r, fmt.Errorf("%w: this server's provider does not serve workspace ports", workspace.ErrBadInput))
		return
	}
	if ws.DesiredState != workspace.Running || !ws.Ready() {
		a.wake(w, r, ws)
		return
	}
	addr, err := ep.Endpoint(r.Context(), ws.ID)
	if err != nil {
		a.starting(w, r, ws, err.Error())
		return
	}
	addr = withPort(addr, appPort)                   // upstream.go
	host, transport := upstream(a.dial, ws.ID, addr) // upstream.go
	rp := &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: host})
			pr.Out.Host = addr
			pr.SetXForwarded() // X-Forwarded-For: the client's address alone
			if prefix != "" {
				pr.Out.URL.Path, pr.Out.URL.RawPath = workspacePath(pr.In)
				pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
			} else {
				pr.Out.URL.Path, pr.Out.URL.RawPath = pr.In.URL.Path, pr.In.URL.RawPath
				upstreamOrigin(pr.Out, a.appsScheme()+"://"+pr.In.Host, "http://"+addr)
			}
			pr.Out.Header.Del("X-Real-Ip") // a client's word for its address or port
			pr.Out.Header.Del("X-Forwarded-Port")
			stripCredentials(pr.Out)
		},
		ModifyResponse: func(resp *http.Response) error {
			// Under /w/ apps are served on the API's origin: a cookie an app
			// sets would be the page's (gantry_session among them), so none
			// reaches the client. On its own host an app keeps its cookies,
			// but none for a wider domain nor named as gantry's.
			if prefix != "" {
				resp.Header.Del("Set-Cookie")
			} else {
				keepAppCookies(resp.Header)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a.log.Debug("workspace: proxy", "id", ws.ID, "err", err)
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": fmt.Sprintf("workspace %s: nothing answers on port %s: %v", ws.ID, port(addr), err)})
		},
	}
	r, stop := a.stream(r, ws.ID) // streams.go: ends with the credential, is activity while open
	defer stop()
	rp.ServeHTTP(w, r)
}

// workspacePath is the path of a proxied request inside the workspace:
// in's path without its /w/{id} prefix, kept as the client encoded it (a
// %2F stays one segment's %2F, not a slash). RawPath is "" when the path
// needs no other encoding than the default.
func workspacePath(in *http.Request) (path, rawPath string) {
	fallback := "/" + in.PathValue("path")
	_, rest, ok := strings.Cut(strings.TrimPrefix(in.URL.EscapedPath(), proxyPrefix), "/")
	if !ok {
		return fallback, ""
	}
	path, err := url.PathUnescape("/" + rest)
	if err != nil || path != fallback {
		return fallback, "" // not what the mux matched: trust the mux
	}
	if rawPath = "/" + rest; rawPath == (&url.URL{Path: path}).EscapedPath() {
		rawPath = ""
	}
	return path, rawPath
}

// stripCredentials removes the caller's gantry token and gantry's cookies
// (the session's, an app host's): the workspace's program never sees them.
func stripCredentials(r *http.Request) {
	r.Header.Del("Authorization")
	cookies := r.Cookies()
	r.Header.Del("Cookie")
	for _, c := range cookies {
		if !gantryCookie(c.Name) {
			r.AddCookie(c)
		}
	}
}

// upstreamOrigin presents an app host's own origin (self, as the browser
// names it) to the app as the origin of the Host the proxy sends it
// (upstream): apps that compare Origin with Host (Jupyter's WebSocket and
// API checks, many dev servers) then see a same-origin request for what is
// one. Any other Origin (another app's host, the API's, another site's,
// "null") goes on unchanged, so the app still refuses it.
func upstreamOrigin(out *http.Request, self, upstream string) {
	if o := out.Header.Values("Origin"); len(o) == 1 && strings.EqualFold(o[0], self) {
		out.Header.Set("Origin", upstream)
	}
}

// gantryCookie reports a cookie name of gantry's: gantry_…, also as a
// __Host- or __Secure- cookie.
func gantryCookie(name string) bool {
	n := strings.ToLower(name)
	for _, prefix := range []string{"__host-", "__secure-"} {
		n = strings.TrimPrefix(n, prefix)
	}
	return strings.HasPrefix(n, "gantry_")
}

// keepAppCookies drops the Set-Cookie lines of an app that name a Domain
// (a cookie for the apps domain's other hosts, the API's among them) or a
// gantry cookie (gantryCookie).
func keepAppCookies(h http.Header) {
	lines := h.Values("Set-Cookie")
	h.Del("Set-Cookie")
	for _, line := range lines {
		c, err := http.ParseSetCookie(line)
		if err == nil && c.Domain == "" && !gantryCookie(c.Name) {
			h.Add("Set-Cookie", line)
		}
	}
}

// wake asks for the workspace to run (if it is not already asked to) and
// answers that it is starting.
func (a *API) wake(w http.ResponseWriter, r *http.Request, ws workspace.Workspace) {
	if ws.ObservedStatus == workspace.Error {
		a.fail(w, r, fmt.Errorf("%w: workspace %s is in ERROR; recover it first", workspace.ErrConflict, ws.ID))
		return
	}
	if ws.DesiredState != workspace.Running {
		n := noteOf(r)
		n.action = "workspace.wake"
		var err error
		ws, err = a.store.SetDesiredOf(r.Context(), ws, workspace.Running, a.cfg.Quotas, a.clock.Now())
		if err != nil {
			a.fail(w, r, err)
			return
		}
		a.hints.Publish(r.Context(), hints.ChanWorkspace, ws.ID)
	}
	a.starting(w, r, ws, "")
}

// starting answers 503 with Retry-After: an HTML page that reloads itself
// for a browser, JSON otherwise.
func (a *API) starting(w http.ResponseWriter, r *http.Request, ws workspace.Workspace, why string) {
	w.Header().Set("Retry-After", "2")
	w.Header().Set("Cache-Control", "no-store")
	msg := fmt.Sprintf("workspace %s is starting (observed %s, operation %s)", ws.Name, ws.ObservedStatus, ws.Operation)
	if why != "" {
		msg += ": " + why
	}
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "<!doctype html><meta http-equiv=\"refresh\" content=\"2\"><title>starting %s</title><p id=\"starting\">%s…</p>\n",
			html.EscapeString(ws.Name), html.EscapeString(msg))
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": msg})
}

// logs streams the workspace command's output: GET …/logs?tail=N&follow=1.
func (a *API) logs(w http.ResponseWriter, r *http.Request) {
	ws, err := a.lookup(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	lr, ok := a.cfg.Container.(provider.LogReader)
	if !ok {
		a.fail(w, r, fmt.Errorf("%w: this server's provider keeps no logs", workspace.ErrBadInput))
		return
	}
	q := r.URL.Query()
	tail := 0
	if s := q.Get("tail"); s != "" {
		if tail, err = strconv.Atoi(s); err != nil || tail < 0 {
			a.fail(w, r, fmt.Errorf("%w: tail %q: want a number of lines", workspace.ErrBadInput, s))
			return
		}
	}
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	rc := http.NewResponseController(w)
	if follow {
		rc.SetWriteDeadline(time.Time{})
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// A followed log that the server ends says why in a trailer: its
	// credential ended (the client exits non-zero, as exec does), or the
	// workspace's log itself ended (deleted).
	w.Header().Set("Trailer", LogEndTrailer)
	r, stop := a.stream(r, "")
	defer stop()
	err = lr.Logs(r.Context(), ws.ID, tail, follow, flushWriter{w, rc})
	if errors.Is(err, provider.ErrNotFound) {
		a.fail(w, r, fmt.Errorf("%w: %v", workspace.ErrNotFound, err))
		return
	}
	if cause := context.Cause(r.Context()); errors.Is(cause, auth.ErrCredentialEnded) {
		w.Header().Set(LogEndTrailer, auth.ErrCredentialEnded.Error())
		return
	}
	if err != nil && r.Context().Err() == nil {
		a.log.Warn("workspace: logs", "id", ws.ID, "err", err)
	}
}

// LogEndTrailer is the trailer of a followed log the server ended: why.
const LogEndTrailer = "Gantry-Log-End"

// flushWriter flushes after every write (a followed log arrives as written).
type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) { return f.w.Write(p) }
func (f flushWriter) Flush()                      { f.rc.Flush() }
