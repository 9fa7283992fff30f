package api

import (
	"errors"
	"fmt"
	"html"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
)

// The accounts routes: who am I, tokens and the audit log (admin only),
// and the page's login and logout.
func (a *API) accountRoutes() []route {
	return []route{
		{"GET /v1/whoami", "", a.whoami},
		{"POST /v1/tokens", "token.create", a.adminOnly(a.createToken)},
		{"GET /v1/tokens", "", a.adminOnly(a.listTokens)},
		{"DELETE /v1/tokens/{id}", "token.revoke", a.adminOnly(a.revokeToken)},
		{"GET /v1/audit", "", a.adminOnly(a.readAudit)},
		{"POST /v1/session", "session.login", a.login},
		{"POST /v1/session/logout", "session.logout", a.logout},
	}
}

// Whoami is the answer of GET /v1/whoami.
type Whoami struct {
	TokenID string `json:"token_id"`
	Owner   string `json:"owner"`
	Admin   bool   `json:"admin"`
}

func (a *API) whoami(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	writeJSON(w, http.StatusOK, Whoami{TokenID: p.TokenID, Owner: p.Owner, Admin: p.Admin})
}

func (a *API) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if p, _ := auth.FromContext(r.Context()); !p.Admin {
			a.fail(w, r, fmt.Errorf("%w: this needs an admin token", errForbidden))
			return
		}
		h(w, r)
	}
}

// TokenRequest is the body of POST /v1/tokens.
type TokenRequest struct {
	Owner string `json:"owner"`
	Admin bool   `json:"admin,omitempty"`
	// ExpiresIn is a Go duration ("720h"); "" = never.
	ExpiresIn string `json:"expires_in,omitempty"`
}

// TokenInfo is a token as the API shows it: never the secret, except once
// in the answer to its creation.
type TokenInfo struct {
	ID        string     `json:"id"`
	Owner     string     `json:"owner"`
	Admin     bool       `json:"admin"`
	CreatedAt time.Time  `json:"created_at"`
	LastUsed  *time.Time `json:"last_used,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Secret    string     `json:"secret,omitempty"`
}

func tokenInfo(t auth.Token) TokenInfo {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return TokenInfo{ID: t.ID, Owner: t.Owner, Admin: t.Admin, CreatedAt: t.CreatedAt,
		LastUsed: opt(t.LastUsed), ExpiresAt: opt(t.ExpiresAt), RevokedAt: opt(t.RevokedAt)}
}

func (a *API) createToken(w http.ResponseWriter, r *http.Request) {
	var req TokenRequest
	if err := decode(r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	var ttl time.Duration
	if req.ExpiresIn != "" {
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || d <= 0 {
			a.fail(w, r, fmt.Errorf("%w: expires_in %q: want a positive duration such as 720h", workspace.ErrBadInput, req.ExpiresIn))
			return
		}
		ttl = d
	}
	if req.Owner == workspace.AdminOwner && !req.Admin {
		a.fail(w, r, fmt.Errorf("%w: owner %q is reserved for admin tokens (it owns the workspaces made before owners existed)", workspace.ErrBadInput, workspace.AdminOwner))
		return
	}
	t, secret, err := auth.NewToken(req.Owner, req.Admin, a.clock.Now(), ttl)
	if err == nil {
		err = a.accounts.CreateToken(r.Context(), t)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	noteDetail(r, "token "+t.ID+" for "+t.Owner)
	info := tokenInfo(t)
	info.Secret = secret
	writeJSON(w, http.StatusCreated, info)
}

func (a *API) listTokens(w http.ResponseWriter, r *http.Request) {
	ts, err := a.accounts.Tokens(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]TokenInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, tokenInfo(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) revokeToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	noteDetail(r, "token "+clipID(id))
	ok, err := a.accounts.RevokeToken(r.Context(), id, a.clock.Now())
	if err == nil && !ok {
		err = fmt.Errorf("%w: token %q", workspace.ErrNotFound, clipID(id))
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	t, _, err := a.accounts.Token(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, tokenInfo(t))
}

func clipID(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func (a *API) readAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := auth.AuditFilter{Workspace: q.Get("workspace"), Owner: q.Get("owner")}
	if s := q.Get("since"); s != "" {
		t, err := parseSince(s, a.clock.Now())
		if err != nil {
			a.fail(w, r, err)
			return
		}
		f.Since = t
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			a.fail(w, r, fmt.Errorf("%w: limit %q: want a positive number", workspace.ErrBadInput, s))
			return
		}
		f.Limit = n
	}
	es, err := a.accounts.Audit(r.Context(), f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if es == nil {
		es = []auth.AuditEntry{}
	}
	writeJSON(w, http.StatusOK, es)
}

// parseSince reads an RFC 3339 time or a duration back from now ("24h").
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%w: since %q: want a duration (24h) or an RFC 3339 time", workspace.ErrBadInput, s)
}

// login turns a token (form field "token", or JSON {"token"}) into a page
// session: an HttpOnly, SameSite=Strict cookie. A form post is redirected
// to the page.
func (a *API) login(w http.ResponseWriter, r *http.Request) {
	secret, form, err := loginSecret(r)
	var p auth.Principal
	if err == nil {
		p, err = a.authn.Check(r, secret)
	}
	if err != nil {
		var te *auth.ThrottledError
		switch {
		case errors.As(err, &te):
			noteOf(r).skipAudit = true // the failures before the throttle were logged and audited
		case !auth.IsStoreError(err):
			a.log.Warn("workspace: page login failed", "remote", auth.RemoteIP(r), "reason", err)
		}
		if form {
			a.failPage(w, r, err)
			return
		}
		a.fail(w, r, err)
		return
	}
	note := noteOf(r)
	note.principal = p
	sec, id, hash, err := auth.NewSecret(auth.SessionPrefix)
	now := a.clock.Now()
	if err == nil {
		err = a.accounts.CreateSession(r.Context(), auth.Session{ID: id, TokenID: p.TokenID, Hash: hash, CreatedAt: now, ExpiresAt: now.Add(a.cfg.SessionTTL)})
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: auth.SessionCookie, Value: sec, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: a.cfg.SecureCookies, MaxAge: int(a.cfg.SessionTTL.Seconds())})
	if form {
		http.Redirect(w, r, loginNext(r), http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, Whoami{TokenID: p.TokenID, Owner: p.Owner, Admin: p.Admin})
}

// failPage answers a form post from the page with a short HTML page.
func (a *API) failPage(w http.ResponseWriter, r *http.Request, err error) {
	code := statusOf(err)
	noteDetail(r, err.Error())
	if code == http.StatusTooManyRequests {
		var te *auth.ThrottledError
		if errors.As(err, &te) {
			w.Header().Set("Retry-After", fmt.Sprint(int(te.RetryAfter.Seconds()+0.999)))
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintf(w, "<!doctype html><title>login failed</title><p id=\"login-failed\">Login failed: %s</p><p><a href=\"/\">Try again</a></p>\n", html.EscapeString(err.Error()))
}

func loginSecret(r *http.Request) (secret string, form bool, err error) {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var body struct {
			Token string `json:"token"`
		}
		err := decode(r, &body)
		return body.Token, false, err
	}
	if err := r.ParseForm(); err != nil {
		return "", true, fmt.Errorf("%w: login form: %v", workspace.ErrBadInput, err)
	}
	return r.PostForm.Get("token"), true, nil
}

// logout ends the page session the request came with.
func (a *API) logout(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	if p.SessionID != "" {
		if err := a.accounts.DeleteSession(r.Context(), p.SessionID); err != nil {
			a.fail(w, r, err)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: auth.SessionCookie, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: a.cfg.SecureCookies, MaxAge: -1})
	w.WriteHeader(http.StatusNoContent)
}
