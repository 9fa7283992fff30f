package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
)

// Warm pools over the API (workspace/pool.go): a template's pool keeps
// that many workspaces of its latest version RUNNING ahead, owned by no
// one. Admins size them; every token reads them.
//
//	GET /v1/templates/{name}/pool  → {"template", "size", "version", "ready", "starting", "draining"}
//	PUT /v1/templates/{name}/pool  {"size": N} → the same (0 drains it)
//
// A create from the template (POST /v1/workspaces {"name", "template",
// "desired_state": "RUNNING"}) whose parameters leave the image and
// command as the defaults make them takes a ready member when there is
// one: it answers 201 with the workspace already RUNNING and "pooled":
// true. If its parameters change the env, the member's command is
// restarted in place with it ("restart_pending": true until it has been;
// exec waits for it with 409 like any start). Any other create from it,
// or one that finds no member ready, starts cold.

// PoolStore keeps the warm pools (store.Pools).
type PoolStore interface {
	SetSize(ctx context.Context, name string, size int, now time.Time) error
	Status(ctx context.Context, name string, version int) (workspace.PoolStatus, error)
	Claim(ctx context.Context, n workspace.NewWorkspace, q auth.Quotas, how workspace.PoolClaim, now time.Time) (workspace.Workspace, bool, error)
}

// PoolRequest is PUT /v1/templates/{name}/pool's body.
type PoolRequest struct {
	Size int `json:"size"`
}

func (a *API) poolRoutes() []route {
	return []route{
		{"GET /v1/templates/{name}/pool", "", a.getPool},
		{"PUT /v1/templates/{name}/pool", "template.pool", a.adminOnly(a.putPool)},
	}
}

// pools is the server's pool store, or an error if it keeps none.
func (a *API) pools() (PoolStore, error) {
	if a.cfg.Pools == nil {
		return nil, fmt.Errorf("%w: this server keeps no warm pools", workspace.ErrBadInput)
	}
	return a.cfg.Pools, nil
}

func (a *API) getPool(w http.ResponseWriter, r *http.Request) {
	st, err := a.poolStatus(r.Context(), r.PathValue("name"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (a *API) poolStatus(ctx context.Context, name string) (workspace.PoolStatus, error) {
	ps, err := a.pools()
	var ts TemplateStore
	if err == nil {
		ts, err = a.templates()
	}
	var t workspace.Template
	if err == nil {
		t, err = ts.Get(ctx, name, 0)
	}
	if err != nil {
		return workspace.PoolStatus{}, err
	}
	return ps.Status(ctx, name, t.Version)
}

func (a *API) putPool(w http.ResponseWriter, r *http.Request) {
	var req PoolRequest
	err := decode(r, &req)
	ps, perr := a.pools()
	if err == nil {
		err = perr
	}
	name := r.PathValue("name")
	if err == nil && req.Size > 0 {
		err = a.canPool(r.Context(), name)
	}
	if err == nil {
		err = ps.SetSize(r.Context(), name, req.Size, a.clock.Now())
	}
	var st workspace.PoolStatus
	if err == nil {
		st, err = a.poolStatus(r.Context(), name)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	noteDetail(r, fmt.Sprintf("template=%s size=%d", name, req.Size))
	writeJSON(w, http.StatusOK, st)
}

// canPool says why template name's latest version cannot have a pool: a
// parameter without a default, or files this server cannot copy.
func (a *API) canPool(ctx context.Context, name string) error {
	ts, err := a.templates()
	var t workspace.Template
	if err == nil {
		t, err = ts.Get(ctx, name, 0)
	}
	if err != nil {
		return err
	}
	if err := t.PoolReady(); err != nil {
		return err
	}
	if _, ok := a.cfg.Storage.(provider.Forker); t.Files != "" && !ok {
		return fmt.Errorf("%w: template %s has files, and this server's storage cannot copy them for a pool", workspace.ErrBadInput, name)
	}
	return nil
}

// claimPooled serves n, a create from template t, from t's warm pool if n
// is what its members run and one is ready (ok); otherwise the caller
// creates n cold.
func (a *API) claimPooled(ctx context.Context, t workspace.Template, n workspace.NewWorkspace) (workspace.Workspace, bool, error) {
	if a.cfg.Pools == nil {
		return workspace.Workspace{}, false, nil
	}
	ok, restart := t.Claims(n)
	if !ok {
		return workspace.Workspace{}, false, nil
	}
	// The member becomes its owner's in the provider too (Docker: its
	// network) a moment later, by the leader (PoolFiller.adopt), off the
	// path of the owner's first commands; until then it sits on the pool
	// members' network, where no container reaches another.
	_, adopt := a.cfg.Container.(provider.Adopter)
	w, ok, err := a.cfg.Pools.Claim(ctx, n, a.cfg.Quotas, workspace.PoolClaim{Adopt: adopt, Restart: restart}, a.clock.Now())
	if ok {
		a.hints.Publish(ctx, hints.ChanPool, t.Name) // the leader refills it now
	}
	return w, ok, err
}
