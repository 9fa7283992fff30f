package workspace

import (
	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// APIStore is what the API reads and writes on users' behalf.
type APIStore interface {
	Create(ctx context.Context, n NewWorkspace, now time.Time) (Workspace, error)
	Get(ctx context.Context, id string) (Workspace, error)
	List(ctx context.Context) ([]Workspace, error)
	SetDesired(ctx context.Context, id string, desired Status, now time.Time) (Workspace, error)
	Recover(ctx context.Context, id string, now time.Time) (Workspace, error)
	Touch(ctx context.Context, id string, now time.Time) error
	MarkDeleted(ctx context.Context, id string, now time.Time) error
}

var _ APIStore = (*store.Store)(nil)

// API is the HTTP JSON API. Routes are registered on one ServeMux from the
// table in routes(); other files (SSE, the web page) add theirs with Handle.
//
//	POST   /v1/workspaces               {"name","command","image","desired_state"} → 201 workspace
//	GET    /v1/workspaces               → [workspace]
//	GET    /v1/workspaces/{id}          → workspace (id or name)
//	PUT    /v1/workspaces/{id}/desired  {"desired_state":"RUNNING|STANDBY|PENDING"} → workspace
//	POST   /v1/workspaces/{id}/recover  → workspace (error info, count, operation cleared)
//	POST   /v1/workspaces/{id}/touch    → 204 (activity: resets the TTL idle clock)
//	DELETE /v1/workspaces/{id}          → 202 workspace (desired DELETED)
//
// The web page (package live) drives these same routes, so a click and a
// CLI command get the same validation and hints.
//
// Errors are {"error": "..."} with 400 (bad JSON, unknown field or state,
// bad name), 404 (unknown id), 409 (name taken, workspace being deleted).
type API struct {
	store   APIStore
	storage interface{ VolumePath(string) string }
	hints   Hints
	log     *slog.Logger
	clock   clock.Clock
	mux     *http.ServeMux
}

// NewAPI builds the API over st; volumePath fills each workspace's volume.
func NewAPI(st APIStore, storage interface{ VolumePath(string) string }, h Hints, log *slog.Logger) *API {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if h == nil {
		h = hints.Drop{}
	}
	a := &API{store: st, storage: storage, hints: h, log: log, clock: clock.Real(), mux: http.NewServeMux()}
	for _, r := range a.routes() {
		a.mux.HandleFunc(r.pattern, r.h)
	}
	return a
}

type route struct {
	pattern string
	h       http.HandlerFunc
}

func (a *API) routes() []route {
	return []route{
		{"POST /v1/workspaces", a.create},
		{"GET /v1/workspaces", a.list},
		{"GET /v1/workspaces/{id}", a.get},
		{"PUT /v1/workspaces/{id}/desired", a.setDesired},
		{"POST /v1/workspaces/{id}/recover", a.recover},
		{"POST /v1/workspaces/{id}/touch", a.touch},
		{"DELETE /v1/workspaces/{id}", a.delete},
	}
}

// Handle adds a route (SSE streams, the web page).
func (a *API) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

// ServeHTTP serves the API.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

func (a *API) fill(w Workspace) Workspace {
	if a.storage != nil {
		w.Volume = a.storage.VolumePath(w.ID)
	}
	return w
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (a *API) fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrBadInput):
		code = http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrNameTaken), errors.Is(err, ErrConflict):
		code = http.StatusConflict
	default:
		a.log.Error("workspace: api", "err", err)
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// decode reads one JSON object into v, refusing unknown fields and trailing data.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: request body: %v", ErrBadInput, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: request body: trailing data after the JSON object", ErrBadInput)
	}
	return nil
}

func (a *API) create(w http.ResponseWriter, r *http.Request) {
	var n NewWorkspace
	if err := decode(r, &n); err != nil {
		a.fail(w, err)
		return
	}
	ws, err := a.store.Create(r.Context(), n, a.clock.Now())
	if err != nil {
		a.fail(w, err)
		return
	}
	a.hints.Publish(r.Context(), ChanWorkspace, ws.ID)
	writeJSON(w, http.StatusCreated, a.fill(ws))
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	all, err := a.store.List(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	out := make([]Workspace, 0, len(all))
	for _, ws := range all {
		out = append(out, a.fill(ws))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	ws, err := a.store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a.fill(ws))
}

// DesiredRequest is the body of PUT …/desired.
type DesiredRequest struct {
	DesiredState string `json:"desired_state"`
}

func (a *API) setDesired(w http.ResponseWriter, r *http.Request) {
	var req DesiredRequest
	if err := decode(r, &req); err != nil {
		a.fail(w, err)
		return
	}
	st, err := ParseDesired(req.DesiredState)
	if err != nil {
		a.fail(w, err)
		return
	}
	ws, err := a.store.SetDesired(r.Context(), r.PathValue("id"), st, a.clock.Now())
	if err != nil {
		a.fail(w, err)
		return
	}
	a.hints.Publish(r.Context(), ChanWorkspace, ws.ID)
	writeJSON(w, http.StatusOK, a.fill(ws))
}

func (a *API) recover(w http.ResponseWriter, r *http.Request) {
	ws, err := a.store.Recover(r.Context(), r.PathValue("id"), a.clock.Now())
	if err != nil {
		a.fail(w, err)
		return
	}
	// The monitor re-observes (it flips ERROR back), then the reconciler acts.
	a.hints.Publish(r.Context(), ChanMonitor, ws.ID)
	writeJSON(w, http.StatusOK, a.fill(ws))
}

// touch records user activity (`gantry ws touch ID`): the TTL manager
// measures idleness from it, and a TTL decision read before it cannot land.
func (a *API) touch(w http.ResponseWriter, r *http.Request) {
	ws, err := a.store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return
	}
	if err := a.store.Touch(r.Context(), ws.ID, a.clock.Now()); err != nil {
		a.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) delete(w http.ResponseWriter, r *http.Request) {
	ws, err := a.store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return
	}
	if err := a.store.MarkDeleted(r.Context(), ws.ID, a.clock.Now()); err != nil {
		a.fail(w, err)
		return
	}
	ws.DesiredState = Deleted
	a.hints.Publish(r.Context(), ChanWorkspace, ws.ID)
	writeJSON(w, http.StatusAccepted, a.fill(ws))
}

// Client talks to the API.
type Client struct {
	Base string // "http://127.0.0.1:7480"
	HTTP *http.Client
}

// APIError is a non-2xx answer.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("server: %s (HTTP %d)", e.Message, e.Status) }

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytesReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&e)
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Create creates a workspace.
func (c *Client) Create(ctx context.Context, n NewWorkspace) (Workspace, error) {
	var w Workspace
	return w, c.do(ctx, "POST", "/v1/workspaces", n, &w)
}

// List lists workspaces.
func (c *Client) List(ctx context.Context) ([]Workspace, error) {
	var ws []Workspace
	return ws, c.do(ctx, "GET", "/v1/workspaces", nil, &ws)
}

// Get reads one workspace (by id or name).
func (c *Client) Get(ctx context.Context, id string) (Workspace, error) {
	var w Workspace
	return w, c.do(ctx, "GET", "/v1/workspaces/"+pathEscape(id), nil, &w)
}

// SetDesired sets the desired state.
func (c *Client) SetDesired(ctx context.Context, id string, st Status) (Workspace, error) {
	var w Workspace
	return w, c.do(ctx, "PUT", "/v1/workspaces/"+pathEscape(id)+"/desired", DesiredRequest{DesiredState: string(st)}, &w)
}

// Recover clears a workspace's error.
func (c *Client) Recover(ctx context.Context, id string) (Workspace, error) {
	var w Workspace
	return w, c.do(ctx, "POST", "/v1/workspaces/"+pathEscape(id)+"/recover", nil, &w)
}

// Delete asks for the workspace's deletion.
func (c *Client) Delete(ctx context.Context, id string) (Workspace, error) {
	var w Workspace
	return w, c.do(ctx, "DELETE", "/v1/workspaces/"+pathEscape(id), nil, &w)
}

// Touch records activity on a workspace (resets its TTL idle clock).
func (c *Client) Touch(ctx context.Context, id string) error {
	return c.do(ctx, "POST", "/v1/workspaces/"+pathEscape(id)+"/touch", nil, nil)
}
