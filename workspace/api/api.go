package api

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// APIStore is what the API reads and writes on users' behalf.
type APIStore interface {
	CreateWithin(ctx context.Context, n workspace.NewWorkspace, q auth.Quotas, now time.Time) (workspace.Workspace, error)
	Lookup(ctx context.Context, ref, owner string) (workspace.Workspace, error)
	List(ctx context.Context) ([]workspace.Workspace, error)
	ListOwned(ctx context.Context, owner string) ([]workspace.Workspace, error)
	SetDesiredOf(ctx context.Context, w workspace.Workspace, desired workspace.Status, q auth.Quotas, now time.Time) (workspace.Workspace, error)
	Recover(ctx context.Context, id string, now time.Time) (workspace.Workspace, error)
	UpdateSpec(ctx context.Context, id string, u workspace.SpecUpdate, now time.Time) (workspace.Workspace, error)
	ChooseArchive(ctx context.Context, id, key string, now time.Time) (workspace.Workspace, error)
	Get(ctx context.Context, id string) (workspace.Workspace, error)
	Touch(ctx context.Context, id string, now time.Time) error
	MarkDeleted(ctx context.Context, id string, now time.Time) error
}

// AccountStore keeps tokens, page sessions and the audit log.
type AccountStore interface {
	auth.Store
	CreateToken(ctx context.Context, t auth.Token) error
	Tokens(ctx context.Context) ([]auth.Token, error)
	RevokeToken(ctx context.Context, id string, now time.Time) (bool, error)
	CreateSession(ctx context.Context, s auth.Session) error
	DeleteSession(ctx context.Context, id string) error
	RecordAudit(ctx context.Context, e auth.AuditEntry) error
	Audit(ctx context.Context, f auth.AuditFilter) ([]auth.AuditEntry, error)
}

// APIConfig configures the API. Zero values are the documented defaults.
type APIConfig struct {
	Store    APIStore     // required
	Accounts AccountStore // required: tokens, sessions, audit
	// Storage fills each workspace's volume path; nil = none.
	Storage interface{ VolumePath(string) string }
	Hints   hints.Bus // nil = none
	// Templates keeps workspace templates (templates.go); nil = none.
	Templates TemplateStore
	// Pools keeps the templates' warm pools (pools.go); nil = none.
	Pools PoolStore
	// Gate is held while an authenticated change is in flight: the bulk
	// work of the store and the reconciler given the same Gate waits for
	// it (package urgency); nil = none.
	Gate *urgency.Gate
	// Quotas per owner; zero fields are unlimited.
	Quotas auth.Quotas
	// Limiter slows down repeated failed authentications per remote
	// address; nil = the defaults of auth.NewLimiter.
	Limiter *auth.Limiter
	// SessionTTL is how long a page login lasts; zero = 12h.
	SessionTTL time.Duration
	// SecureCookies marks the session cookie Secure (the server has TLS).
	SecureCookies bool
	// Container, if it is a provider.Endpointer, serves /w/{id}/ (the
	// workspace's PORT); nil = no proxy.
	Container provider.Container
	// ActivityEvery bounds how often proxied traffic touches a workspace;
	// zero = DefaultActivityEvery.
	ActivityEvery time.Duration
	// RecheckEvery is how often an open stream (exec, logs -f, a proxied
	// request) checks its credential again, ending when it is revoked,
	// expired or logged out; zero = auth.DefaultRecheckEvery.
	RecheckEvery time.Duration
	// SSHHostKey is the host key of the SSH server behind
	// /v1/workspaces/{id}/ssh (ssh.go); nil = one generated at the first
	// connection, kept in memory.
	SSHHostKey ssh.Signer
	// AppsURL ("http://localhost:7480") gives each workspace's app an
	// origin of its own: {label}.{its host name} (apps.go); its scheme and
	// port make Workspace.URL. "" = no app hosts.
	AppsURL string
	// APIURL is the API's origin as a browser on an app host reaches it;
	// "" = AppsURL's scheme and host name with the request's port.
	APIURL string
	Clock  clock.Clock
	Logger *slog.Logger
}

// API is the HTTP JSON API. Routes are registered on one ServeMux from the
// table in routes(); other files (SSE, the web page) add theirs with Handle.
// Every request but the public ones (access.go) is authenticated, and every
// mutating request is audited.
//
//	POST   /v1/workspaces               {"name","command","image","desired_state"} → 201 workspace
//	GET    /v1/workspaces[?owner=NAME]  → [workspace] (the caller's; an admin's: all, or NAME's)
//	GET    /v1/workspaces/{id}          → workspace (id or name)
//	PUT    /v1/workspaces/{id}/desired  {"desired_state":"RUNNING|STANDBY|PENDING"} → workspace
//	POST   /v1/workspaces/{id}/recover  → workspace (error info, count, operation cleared)
//	POST   /v1/workspaces/{id}/touch    → 204 (activity: resets the TTL idle clock)
//	DELETE /v1/workspaces/{id}          → 202 workspace (desired DELETED)
//	GET    /v1/whoami                   → {"token_id","owner","admin"}
//	POST   /v1/tokens, GET /v1/tokens, DELETE /v1/tokens/{id}, GET /v1/audit (admin; accounts.go)
//	POST   /v1/session, POST /v1/session/logout (the page's login; accounts.go)
//	ANY    /w/{id}/…                    → the workspace's PORT (proxy.go; wakes it if needed)
//	POST   /v1/workspaces/{id}/fork     {"name","desired_state","archive"} → 201 workspace (fork.go)
//	GET/POST/PUT/DELETE /v1/templates…  templates (templates.go)
//	GET    /v1/workspaces/{id}/ssh      Upgrade: ssh → 101, then SSH (ssh.go)
//	GET    /v1/apps/authorize?host=H&return=P → 302 to H's login callback (apps_login.go)
//	ANY    {name}--{owner}.{apps domain}/… → the workspace's PORT (apps.go)
//	ANY    {app}--{name}--{owner}.{apps domain}/… → the app's port (apps_share.go)
//
// The web page (package live) drives these same routes, so a click and a
// CLI command get the same validation, quotas, audit and hints.
//
// Errors are {"error": "..."} with 400 (bad JSON, unknown field or state,
// bad name), 401 (no, bad, expired or revoked token), 403 (admin only,
// cross-site), 404 (unknown id, or another owner's), 409 (name taken,
// workspace being deleted), 413 (body over 1 MiB), 429 (quota, or too many
// failed authentications: Retry-After).
type API struct {
	cfg      APIConfig
	store    APIStore
	accounts AccountStore
	authn    *auth.Authenticator
	hints    hints.Bus
	log      *slog.Logger
	clock    clock.Clock
	mux      *http.ServeMux
	actions  map[string]string // mux pattern → audit action
	cop      *http.CrossOriginProtection
	touches  activity               // proxied traffic's activity, rate-limited
	dial     http.RoundTripper      // the proxy's transport through a PortDialer; nil: the default one
	apps     appKeys                // app hosts' codes and sessions (apps.go)
	appsURLv atomic.Pointer[string] // AppsURL, its port set once known (SetAppsURL)

	hostKeyOnce sync.Once // sshHostKey (ssh.go)
	hostKey     ssh.Signer
	hostKeyErr  error
}

// NewAPI builds the API over cfg.Store and cfg.Accounts.
func NewAPI(cfg APIConfig) *API {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Hints == nil {
		cfg.Hints = hints.Drop{}
	}
	if cfg.Limiter == nil {
		cfg.Limiter = auth.NewLimiter(auth.LimiterConfig{Clock: cfg.Clock})
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.ActivityEvery <= 0 {
		cfg.ActivityEvery = DefaultActivityEvery
	}
	cfg.Clock = clock.Or(cfg.Clock)
	a := &API{cfg: cfg, store: cfg.Store, accounts: cfg.Accounts, hints: urgency.Hints{Bus: cfg.Hints}, log: cfg.Logger, clock: cfg.Clock,
		mux: http.NewServeMux(), actions: map[string]string{}, cop: http.NewCrossOriginProtection()}
	a.authn = auth.NewAuthenticator(cfg.Accounts, cfg.Clock, cfg.Limiter)
	a.dial = newDialTransport(cfg.Container)
	a.appsURLv.Store(&cfg.AppsURL)
	for _, r := range a.routes() {
		a.mux.HandleFunc(r.pattern, r.h)
		if r.action != "" {
			a.actions[r.pattern] = r.action
		}
	}
	return a
}

type route struct {
	pattern string
	action  string // the audit action of a mutating route; "" for reads
	h       http.HandlerFunc
}

func (a *API) routes() []route {
	return append([]route{
		{"POST /v1/workspaces", "workspace.create", a.create},
		{"GET /v1/workspaces", "", a.list},
		{"GET /v1/workspaces/{id}", "", a.get},
		{"PATCH /v1/workspaces/{id}", "workspace.update", a.update},
		{"PUT /v1/workspaces/{id}/desired", "workspace.desired", a.setDesired},
		{"POST /v1/workspaces/{id}/recover", "workspace.recover", a.recover},
		{"POST /v1/workspaces/{id}/touch", "workspace.touch", a.touch},
		{"DELETE /v1/workspaces/{id}", "workspace.delete", a.delete},
		{"GET /v1/workspaces/{id}/archives", "", a.archives},
		{"POST /v1/workspaces/{id}/restore", "workspace.restore", a.restore},
		{"POST /v1/workspaces/{id}/fork", "workspace.fork", a.fork},
		{"GET " + authorizePath, "", a.authorize},
	}, slices.Concat(a.accountRoutes(), a.templateRoutes(), a.poolRoutes(), a.proxyRoutes())...)
}

// Handle adds a route (SSE streams, the web page). Its requests are
// authenticated like the API's unless public (access.go).
func (a *API) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

func (a *API) fill(w workspace.Workspace) workspace.Workspace {
	if a.cfg.Storage != nil {
		w.Volume = a.cfg.Storage.VolumePath(w.ID)
	}
	w.URL = a.appURL(w)
	return a.withApps(w) // apps_share.go
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// errForbidden is 403: an admin-only route, or a cross-site request.
var errForbidden = errors.New("forbidden")

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var qe *auth.QuotaError
	var te *auth.ThrottledError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, workspace.ErrBadInput), errors.Is(err, auth.ErrBadOwner):
		return http.StatusBadRequest
	case errors.Is(err, workspace.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, workspace.ErrNameTaken), errors.Is(err, workspace.ErrConflict):
		return http.StatusConflict
	case errors.As(err, &qe), errors.As(err, &te):
		return http.StatusTooManyRequests
	case errors.Is(err, errForbidden):
		return http.StatusForbidden
	case auth.IsStoreError(err):
		return http.StatusServiceUnavailable
	case isAuthError(err):
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

func isAuthError(err error) bool {
	for _, e := range []error{auth.ErrNoToken, auth.ErrMalformed, auth.ErrUnknownToken, auth.ErrRevoked, auth.ErrExpired, auth.ErrNoSession} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := statusOf(err)
	msg := err.Error()
	switch code {
	case http.StatusInternalServerError, http.StatusServiceUnavailable:
		// The error can name the database's host, user or more: it goes
		// to the log (and the audit row) only, under a reference.
		ref := rand.Text()[:8]
		a.log.Error("workspace: api", "method", r.Method, "path", r.URL.Path, "ref", ref, "err", err)
		msg = fmt.Sprintf("%s (ref %s: details in the server's log)", strings.ToLower(http.StatusText(code)), ref)
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="gantry"`)
	case http.StatusTooManyRequests:
		var te *auth.ThrottledError
		if errors.As(err, &te) {
			w.Header().Set("Retry-After", fmt.Sprint(int(te.RetryAfter.Seconds()+0.999)))
		}
	}
	if streamsBody(r) && r.ProtoMajor == 1 {
		// The body (exec's stdin, a proxied upload) is a stream that may
		// not end for a long time: answer now and close the connection.
		// Otherwise net/http reads the body to its end (or 256 KB) before
		// it sends the answer, and the caller of `ws exec -i`/`-t` waits
		// for a refusal that never comes. (HTTP/2 resets the stream
		// instead, and would read this header as a GOAWAY.)
		w.Header().Set("Connection", "close")
	}
	noteDetail(r, err.Error())
	writeJSON(w, code, map[string]string{"error": msg})
}

// decode reads one JSON object into v, refusing unknown fields and trailing
// data; the body is already capped at maxBody (access.go: 413 beyond).
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return err
		}
		return fmt.Errorf("%w: request body: %v", workspace.ErrBadInput, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: request body: trailing data after the JSON object", workspace.ErrBadInput)
	}
	return nil
}

// lookup resolves the {id} of the request among the caller's workspaces:
// another owner's is ErrNotFound, like one that does not exist.
func (a *API) lookup(r *http.Request) (workspace.Workspace, error) {
	p, _ := auth.FromContext(r.Context())
	ws, err := a.store.Lookup(r.Context(), r.PathValue("id"), p.Scope())
	if err == nil {
		noteWorkspace(r, ws.ID)
	}
	return ws, err
}

func (a *API) create(w http.ResponseWriter, r *http.Request) {
	var n workspace.NewWorkspace
	if err := decode(r, &n); err != nil {
		a.fail(w, r, err)
		return
	}
	p, _ := auth.FromContext(r.Context())
	n.Owner = p.Owner
	ws, pooled, err := a.createOf(r.Context(), n)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	noteWorkspace(r, ws.ID)
	a.auditShares(r, workspace.Workspace{}, ws) // apps_share.go
	if pooled {
		noteDetail(r, "from the warm pool of template "+n.Template)
	}
	a.hints.Publish(r.Context(), hints.ChanWorkspace, ws.ID)
	ws = a.fill(ws)
	ws.Pooled = pooled
	writeJSON(w, http.StatusCreated, ws)
}

// createOf makes n: from its template's warm pool if one of its members
// serves it (pooled), else a new row the reconciler will provision.
func (a *API) createOf(ctx context.Context, n workspace.NewWorkspace) (ws workspace.Workspace, pooled bool, err error) {
	n.Spec.Template = nil
	if n.Template != "" {
		var t workspace.Template
		if t, n, err = a.fromTemplate(ctx, n); err != nil {
			return ws, false, err
		}
		if err = a.checkSpec(n.Image, n.Command, n.Spec); err != nil { // today's policy, whatever the members were made under
			return ws, false, err
		}
		if ws, pooled, err = a.claimPooled(ctx, t, n); err != nil || pooled {
			return ws, pooled, err
		}
		if n, err = a.withTemplateFiles(ctx, t, n); err != nil {
			a.dropArchive(ctx, n.ArchiveKey)
			return ws, false, err
		}
	}
	if err = a.checkSpec(n.Image, n.Command, n.Spec); err == nil {
		ws, err = a.store.CreateWithin(ctx, n, a.cfg.Quotas, a.clock.Now())
	}
	if err != nil && n.ArchiveKey != "" { // a template's files, copied for it
		a.dropArchive(ctx, n.ArchiveKey)
	}
	return ws, false, err
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	owner := r.URL.Query().Get("owner")
	var all []workspace.Workspace
	var err error
	switch {
	case owner != "" && !p.Admin && owner != p.Owner:
		err = fmt.Errorf("%w: only an admin token lists another owner's workspaces", errForbidden)
	case owner != "":
		all, err = a.store.ListOwned(r.Context(), owner)
	case p.Admin:
		all, err = a.store.List(r.Context())
	default:
		all, err = a.store.ListOwned(r.Context(), p.Owner)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]workspace.Workspace, 0, len(all))
	members := r.URL.Query().Get("pool") == "true"
	for _, ws := range all {
		if workspace.IsPoolOwner(ws.Owner) == members { // ?pool=true: the warm pools' unclaimed members instead
			out = append(out, a.fill(ws))
		}
	}
	a.fillTemplates(r.Context(), out)
	writeJSON(w, http.StatusOK, out)
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	ws, err := a.lookup(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	one := []workspace.Workspace{a.fill(ws)}
	a.fillTemplates(r.Context(), one)
	writeJSON(w, http.StatusOK, one[0])
}

// DesiredRequest is the body of PUT …/desired.
type DesiredRequest struct {
	DesiredState string `json:"desired_state"`
}

// desiredActions names the audit action of each desired state.
var desiredActions = map[workspace.Status]string{workspace.Running: "workspace.up", workspace.Standby: "workspace.down", workspace.Pending: "workspace.archive"}

// checkSpec refuses what the server's provider would not enforce (limits,
// provider.LimitChecker) or could never start (a workspace without an image
// where there is no default one, provider.SpecChecker).
func (a *API) checkSpec(image, command string, s workspace.Spec) error {
	limits := provider.Limits{CPUs: s.CPUs, Memory: s.Memory, Pids: s.Pids}
	var err error
	if lc, ok := a.cfg.Container.(provider.LimitChecker); ok {
		err = lc.CheckLimits(limits)
	}
	if sc, ok := a.cfg.Container.(provider.SpecChecker); ok && err == nil {
		err = sc.CheckSpec(provider.Spec{Image: image, Command: command, Env: s.Env, Limits: limits, HTTP: s.HTTP})
	}
	if err != nil {
		return fmt.Errorf("%w: %v", workspace.ErrBadInput, err)
	}
	return nil
}

// update applies a SpecUpdate (PATCH): it takes effect at the next start.
func (a *API) update(w http.ResponseWriter, r *http.Request) {
	var u workspace.SpecUpdate
	err := decode(r, &u)
	var ws workspace.Workspace
	if err == nil {
		ws, err = a.lookup(r)
	}
	if err == nil && u.TemplateVersion != "" {
		u, err = a.moveTemplate(r.Context(), ws, u)
	}
	if err == nil {
		var nw workspace.Workspace
		if nw, err = u.Apply(ws); err == nil {
			err = a.checkSpec(nw.Image, nw.Command, nw.Spec)
		}
	}
	before := ws
	if err == nil {
		ws, err = a.store.UpdateSpec(r.Context(), ws.ID, u, a.clock.Now())
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditShares(r, before, ws) // apps_share.go
	a.hints.Publish(r.Context(), hints.ChanWorkspace, ws.ID)
	writeJSON(w, http.StatusOK, a.fill(ws))
}

func (a *API) setDesired(w http.ResponseWriter, r *http.Request) {
	var req DesiredRequest
	err := decode(r, &req)
	var st workspace.Status
	if err == nil {
		st, err = workspace.ParseDesired(req.DesiredState)
		noteAction(r, desiredActions[st])
	}
	var ws workspace.Workspace
	if err == nil {
		ws, err = a.lookup(r)
	}
	if err == nil {
		ws, err = a.store.SetDesiredOf(r.Context(), ws, st, a.cfg.Quotas, a.clock.Now())
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.hints.Publish(r.Context(), hints.ChanWorkspace, ws.ID)
	writeJSON(w, http.StatusOK, a.fill(ws))
}

func (a *API) recover(w http.ResponseWriter, r *http.Request) {
	ws, err := a.lookup(r)
	if err == nil {
		ws, err = a.store.Recover(r.Context(), ws.ID, a.clock.Now())
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	// The monitor re-observes (it flips ERROR back), then the reconciler acts.
	a.hints.Publish(r.Context(), hints.ChanMonitor, ws.ID)
	writeJSON(w, http.StatusOK, a.fill(ws))
}

// touch records user activity (`gantry ws touch ID`): the TTL manager
// measures idleness from it, and a TTL decision read before it cannot land.
func (a *API) touch(w http.ResponseWriter, r *http.Request) {
	ws, err := a.lookup(r)
	if err == nil {
		err = a.store.Touch(r.Context(), ws.ID, a.clock.Now())
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) delete(w http.ResponseWriter, r *http.Request) {
	ws, err := a.lookup(r)
	if err == nil {
		err = a.store.MarkDeleted(r.Context(), ws.ID, a.clock.Now())
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ws.DesiredState = workspace.Deleted
	a.hints.Publish(r.Context(), hints.ChanWorkspace, ws.ID)
	writeJSON(w, http.StatusAccepted, a.fill(ws))
}
