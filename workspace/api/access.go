package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// maxBody caps every request body; more is 413.
const maxBody = 1 << 20

// ServeHTTP is the front door of every request: the body cap, the
// cross-site check, authentication (all but the public routes), then the
// route, then the audit row of a mutating route, accepted or refused.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.serveApp(w, r) { // a workspace app's own host (apps.go)
		return
	}
	if r.Body != nil && !streamsBody(r) {
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	}
	_, pattern := a.mux.Handler(r)
	note := &reqNote{action: a.actions[pattern], workspace: pathWorkspace(r.URL.Path)}
	// Every request is a user's: its statements and hints go ahead of bulk
	// work (urgent.go).
	r = r.WithContext(urgency.Mark(context.WithValue(r.Context(), noteKey{}, note)))
	rec := &recorder{ResponseWriter: w}
	defer a.audit(r, rec, note)
	r, ok := a.admit(rec, r, note)
	if !ok {
		return
	}
	if note.action != "" && !streamsBody(r) && !isPublic(r) {
		// An authenticated change (not a stream, not the login): the bulk
		// waits while it is in flight (package urgency).
		defer a.cfg.Gate.BeginUrgent()()
	}
	a.mux.ServeHTTP(rec, r)
}

// streamsBody reports the requests whose body is a stream for a workspace's
// program (the proxy, exec's stdin, an SSH connection): the program sets
// its own limits.
func streamsBody(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, proxyPrefix) || r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/exec") ||
		r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/workspaces/") && strings.HasSuffix(r.URL.Path, "/ssh")
}

// IsStream reports the requests that may rightly stay open for long: the
// proxy (a WebSocket, a long poll, a download) and an app host's request,
// exec, a followed log and the SSE event streams. The server's read and
// write timeouts spare them (the client, the workspace or the end of the
// credential ends them); they bound every other request.
func (a *API) IsStream(r *http.Request) bool {
	if _, app := a.appOf(r); streamsBody(r) || app {
		return true
	}
	p := r.URL.Path
	switch {
	case p == "/events", strings.HasPrefix(p, "/workspaces/") && strings.HasSuffix(p, "/events"):
		return true
	case strings.HasPrefix(p, "/v1/workspaces/") && strings.HasSuffix(p, "/logs"):
		f := r.URL.Query().Get("follow")
		return f == "1" || f == "true"
	}
	return false
}

// isPublic reports the routes served without a token: the probes and
// metrics (which name no workspace or owner), the page's shell and static
// files (no data: the page logs in, then reads the API), the login, and an
// app's authorization (which checks the page session itself).
func isPublic(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/healthz", p == "/readyz", p == "/metrics", strings.HasPrefix(p, "/static/"):
		return true
	case p == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		return true
	case p == "/v1/session" && r.Method == http.MethodPost, p == authorizePath && r.Method == http.MethodGet:
		return true
	}
	return false
}

// admit refuses cross-site state changes and unauthenticated requests; an
// admitted request carries its principal (auth.FromContext).
func (a *API) admit(w http.ResponseWriter, r *http.Request, note *reqNote) (*http.Request, bool) {
	if err := a.cop.Check(r); err != nil {
		// Anyone can send these: audit them only at the failure limiter's pace.
		note.skipAudit = a.authn.Throttled(auth.RemoteIP(r))
		a.fail(w, r, fmt.Errorf("%w: cross-site request refused (Origin %q)", errForbidden, r.Header.Get("Origin")))
		return r, false
	}
	if isPublic(r) {
		return r, true
	}
	p, err := a.authn.Authenticate(r)
	if err != nil {
		note.principal.TokenID = auth.PresentedTokenID(r)
		var te *auth.ThrottledError
		switch {
		case errors.As(err, &te):
			note.skipAudit = true // unbounded: the failures before the throttle were logged and audited
		case !auth.IsStoreError(err):
			a.log.Warn("workspace: authentication failed", "remote", auth.RemoteIP(r), "method", r.Method, "path", r.URL.Path, "reason", err)
		}
		a.fail(w, r, err)
		return r, false
	}
	note.principal = p
	if p.SessionID != "" && unsafeMethod(r.Method) && fromAnotherOrigin(r) {
		// Defense in depth under the check above: the page's session
		// cookie never acts for a page of another origin, an app's among
		// them (same-site with the API when the operator puts apps under
		// the API's registrable domain, where SameSite does not help).
		a.fail(w, r, fmt.Errorf("%w: the page's session does not act for another origin (Origin %q, Sec-Fetch-Site %q)",
			errForbidden, r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site")))
		return r, false
	}
	ctx := auth.WithPrincipal(r.Context(), p)
	// Open streams re-check that the credential still holds (revoked,
	// logged out, expired: auth.Watch), outside the failure limiter.
	ctx = auth.WithRecheck(ctx, func() error { _, err := a.authn.Reauthenticate(r); return err })
	return r.WithContext(ctx), true
}

func unsafeMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

// fromAnotherOrigin reports whether the browser says r comes from a page
// of another origin than the API's: Sec-Fetch-Site, or without it, an
// Origin whose host is not r's.
func fromAnotherOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "":
	default:
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host)
}

// audit records the request if its route mutates.
func (a *API) audit(r *http.Request, rec *recorder, note *reqNote) {
	if note.action == "" || note.skipAudit {
		return
	}
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	e := auth.AuditEntry{At: a.clock.Now(), TokenID: note.principal.TokenID, Owner: note.principal.Owner,
		Action: note.action, Workspace: note.workspace, Status: status, Remote: auth.RemoteIP(r)}
	if status >= 400 {
		e.Detail = note.detail
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := a.accounts.RecordAudit(ctx, e); err != nil {
		a.log.Error("workspace: audit log write failed", "action", e.Action, "status", e.Status, "err", err)
	}
}

// pathWorkspace is the {id} of a /v1/workspaces/{id}… path, for the audit
// row of a request refused before its route ran.
func pathWorkspace(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/workspaces/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// reqNote is what a request's audit row needs that only the route learns:
// the resolved workspace id, a finer action, why it was refused.
type reqNote struct {
	action, workspace, detail string
	principal                 auth.Principal
	skipAudit                 bool
}

type noteKey struct{}

func noteOf(r *http.Request) *reqNote {
	n, _ := r.Context().Value(noteKey{}).(*reqNote)
	if n == nil {
		return &reqNote{}
	}
	return n
}

func noteWorkspace(r *http.Request, id string) { noteOf(r).workspace = id }
func noteDetail(r *http.Request, d string)     { noteOf(r).detail = d }
func noteAction(r *http.Request, action string) {
	if n := noteOf(r); action != "" && n.action != "" {
		n.action = action
	}
}

// recorder remembers the status a route answered; Unwrap lets
// http.ResponseController (SSE flushes, deadlines) reach the connection.
type recorder struct {
	http.ResponseWriter
	status int
}

func (rw *recorder) WriteHeader(code int) {
	if rw.status == 0 {
		rw.status = code
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *recorder) Write(b []byte) (int, error) {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	return rw.ResponseWriter.Write(b)
}

func (rw *recorder) Unwrap() http.ResponseWriter { return rw.ResponseWriter }
