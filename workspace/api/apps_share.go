package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
)

// Apps beyond the default one, and share levels. A workspace's default
// app (workspace.DefaultApp, "main", on $PORT) is at {name}--{owner}; an
// app it declares (Spec.Apps, on its own port) at {app}--{name}--{owner}
// (no URL if that is over 63 characters). Workspace names may hold "--",
// so a label can read both ways; it resolves deterministically, each step
// one lookup of the owner's workspaces:
//
//  1. the default app of the workspace named all of the label before
//     --{owner}, if that workspace exists;
//  2. else the app named up to the first "--" of the workspace named by
//     the rest, if that workspace exists and declares that app;
//  3. else nothing (404 after the login, as for an unknown workspace).
//
// The share level applied is always the resolved app's: a workspace
// "web--foo" shadows app "web" of workspace "foo" (same owner) and its own
// level holds on that host.
//
// Share levels: owner (the owner or an admin, after the app login),
// authenticated (any page session of this server, after the same login),
// public (no login; no gantry cookie is set, and the proxy strips
// gantry_session, gantry_app and Authorization as for any app). Each is
// checked at every request and, for open streams, at every RecheckEvery:
// lowering an app's level ends the sessions it no longer admits. Setting
// a level other than owner is audited (workspace.app.share, its detail
// naming the app and the level).

// appHost is a parsed app host.
type appHost struct {
	host  string // lower case, with its port if it had one
	label string // its first label
	owner string // the label after its last "--"
}

// appRef is a workspace name and one of its apps.
type appRef struct{ name, app string }

// parseAppHost parses hostport as an app host under domain: a single label
// before the domain, ending in --{owner}, that names some app.
func parseAppHost(hostport, domain string) (appHost, bool) {
	if domain == "" {
		return appHost{}, false
	}
	host := strings.ToLower(hostport)
	hn := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		hn = h
	}
	label, found := strings.CutSuffix(hn, "."+domain)
	if !found || strings.Contains(label, ".") || len(label) > 63 {
		return appHost{}, false
	}
	i := strings.LastIndex(label, "--")
	if i <= 0 {
		return appHost{}, false
	}
	h := appHost{host: host, label: label, owner: label[i+2:]}
	return h, len(h.refs()) > 0
}

// refs are the apps h's label can name, in the order they are tried.
func (h appHost) refs() []appRef {
	rest := h.label[:len(h.label)-len(h.owner)-2]
	var out []appRef
	if AppLabel(rest, h.owner) == h.label {
		out = append(out, appRef{name: rest, app: workspace.DefaultApp})
	}
	if app, name, ok := strings.Cut(rest, "--"); ok && app != workspace.DefaultApp && workspace.ValidAppName(app) == nil && AppLabel(name, h.owner) != "" {
		out = append(out, appRef{name: name, app: app})
	}
	return out
}

// resolveApp finds the workspace and app of h (see above): ErrNotFound if
// none, a store error as it is.
func (a *API) resolveApp(ctx context.Context, h appHost) (workspace.Workspace, workspace.App, error) {
	for _, ref := range h.refs() {
		ws, err := a.store.Lookup(ctx, ref.name, h.owner)
		if errors.Is(err, workspace.ErrNotFound) {
			continue
		}
		if err != nil {
			return ws, workspace.App{}, err
		}
		if app, ok := ws.App(ref.app); ok {
			return ws, app, nil
		}
		break
	}
	return workspace.Workspace{}, workspace.App{}, fmt.Errorf("%w: no app at host %s", workspace.ErrNotFound, h.host)
}

// mayOpen reports whether p may open app of ws.
func mayOpen(p auth.Principal, ws workspace.Workspace, app workspace.App) bool {
	switch app.Share.Level() {
	case workspace.SharePublic:
		return true
	case workspace.ShareAuthenticated:
		return p.TokenID != "" || p.SessionID != "" || p.Admin
	}
	return p.MaySee(ws.Owner)
}

// stillOpen is the recheck of an open app stream: h still resolves to
// workspace id, whose app still admits p. A store failure is no end.
func (a *API) stillOpen(ctx context.Context, h appHost, id string, p auth.Principal) error {
	ws, app, err := a.resolveApp(ctx, h)
	switch {
	case err != nil && !errors.Is(err, workspace.ErrNotFound):
		return nil
	case err != nil || ws.ID != id || !mayOpen(p, ws, app):
		return fmt.Errorf("%w: the app at %s is no longer shared with you", auth.ErrNoSession, h.host)
	}
	return nil
}

// servePublic forwards r to a public app: no login, no cookie; an open
// stream ends once the app is no longer public.
func (a *API) servePublic(w http.ResponseWriter, r *http.Request, h appHost, ws workspace.Workspace, app workspace.App) {
	noteWorkspace(r, ws.ID)
	ctx := r.Context()
	ctx = auth.WithRecheck(ctx, func() error { return a.stillOpen(ctx, h, ws.ID, auth.Principal{}) })
	a.forward(w, r.WithContext(ctx), ws, "", app.Port)
}

// withApps is w with its apps listed, main first, each with its URL.
func (a *API) withApps(w workspace.Workspace) workspace.Workspace {
	w.Apps = w.AllApps()
	for i := range w.Apps {
		w.Apps[i].URL = a.appURLOf(w, w.Apps[i].Name)
	}
	return w
}

// auditShares records, for each app of after shared wider than owner whose
// level before was another, an audit row naming the app and its level.
func (a *API) auditShares(r *http.Request, before, after workspace.Workspace) {
	p, _ := auth.FromContext(r.Context())
	for _, app := range after.AllApps() {
		if app.Share == workspace.ShareOwner {
			continue
		}
		if old, ok := before.App(app.Name); ok && old.Share == app.Share && before.ID != "" {
			continue
		}
		e := auth.AuditEntry{At: a.clock.Now(), TokenID: p.TokenID, Owner: p.Owner, Action: "workspace.app.share",
			Workspace: after.ID, Status: http.StatusOK, Remote: auth.RemoteIP(r),
			Detail: fmt.Sprintf("app %s (port %s) shared: %s", app.Name, appPort(app), app.Share)}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
		if err := a.accounts.RecordAudit(ctx, e); err != nil {
			a.log.Error("workspace: audit log write failed", "action", e.Action, "err", err)
		}
		cancel()
	}
}

// auditTimeout bounds an audit row's write.
const auditTimeout = 5 * time.Second

// appPort is app's port as the audit names it.
func appPort(app workspace.App) string {
	if app.Port == 0 {
		return "$PORT"
	}
	return fmt.Sprint(app.Port)
}

// SetAppsURL replaces APIConfig.AppsURL: the server sets the port it
// listens on once it knows it (--listen :0).
func (a *API) SetAppsURL(u string) { a.appsURLv.Store(&u) }

func (a *API) appsURL() string { return *a.appsURLv.Load() }
