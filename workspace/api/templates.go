package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider"
)

// Templates over the API (workspace.Template: named, versioned specs with
// typed parameters). Admins write them; every token reads them and
// creates from them.
//
//	POST   /v1/templates                  template → 201 (version 1; 409 if the name exists)
//	GET    /v1/templates                  → [template] (each one's latest version)
//	GET    /v1/templates/{name}[?version=N] → template (latest by default)
//	GET    /v1/templates/{name}/versions  → [template], newest first
//	PUT    /v1/templates/{name}           template → 200 (a new version)
//	DELETE /v1/templates/{name}           → 204; 409 while a workspace uses it
//
// A workspace is made from one by POST /v1/workspaces {"name", "template",
// "params"}: the latest version, its placeholders filled (a parameter that
// fails its type, pattern, choices or range is a 400 naming it), the
// version and the given parameters recorded in the workspace's spec
// ("template"). PATCH /v1/workspaces/{id} {"template_version": "latest"|N}
// moves it to another version with the same parameters (taking effect at
// its next start). Workspace reads carry "template_latest" when the
// workspace's version is not its template's latest.

// TemplateStore keeps templates (store.Templates).
type TemplateStore interface {
	Put(ctx context.Context, t workspace.Template, first bool, now time.Time) (workspace.Template, error)
	Get(ctx context.Context, name string, version int) (workspace.Template, error)
	List(ctx context.Context) ([]workspace.Template, error)
	Versions(ctx context.Context, name string) ([]workspace.Template, error)
	Latest(ctx context.Context) (map[string]int, error)
	Delete(ctx context.Context, name string) error
}

func (a *API) templateRoutes() []route {
	return []route{
		{"POST /v1/templates", "template.create", a.adminOnly(a.putTemplate(true))},
		{"GET /v1/templates", "", a.listTemplates},
		{"GET /v1/templates/{name}", "", a.getTemplate},
		{"GET /v1/templates/{name}/versions", "", a.templateVersions},
		{"PUT /v1/templates/{name}", "template.update", a.adminOnly(a.putTemplate(false))},
		{"DELETE /v1/templates/{name}", "template.delete", a.adminOnly(a.deleteTemplate)},
	}
}

// templates is the server's template store, or an error if it has none.
func (a *API) templates() (TemplateStore, error) {
	if a.cfg.Templates == nil {
		return nil, fmt.Errorf("%w: this server keeps no templates", workspace.ErrNotFound)
	}
	return a.cfg.Templates, nil
}

func (a *API) putTemplate(first bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var t workspace.Template
		err := decode(r, &t)
		ts, terr := a.templates()
		switch {
		case err != nil:
		case terr != nil:
			err = terr
		case !first && t.Name != "" && t.Name != r.PathValue("name"):
			err = fmt.Errorf("%w: the body names template %q, the path %q", workspace.ErrBadInput, t.Name, r.PathValue("name"))
		}
		if !first {
			t.Name = r.PathValue("name")
		}
		made := ""
		if err == nil && t.From != "" {
			made, err = a.templateFiles(r.Context(), &t)
		}
		if err == nil {
			err = a.checkSpec(t.Image, t.Command, t.Spec)
		}
		if err == nil {
			t, err = ts.Put(r.Context(), t, first, a.clock.Now())
		}
		if err != nil {
			if made != "" {
				a.dropArchive(r.Context(), made)
			}
			a.fail(w, r, err)
			return
		}
		code := http.StatusOK
		if first {
			code = http.StatusCreated
		}
		writeJSON(w, code, t)
	}
}

func (a *API) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := a.templates()
	var all []workspace.Template
	if err == nil {
		all, err = ts.List(r.Context())
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, all)
}

func (a *API) getTemplate(w http.ResponseWriter, r *http.Request) {
	ts, err := a.templates()
	version := 0
	if v := r.URL.Query().Get("version"); v != "" && err == nil {
		version, err = parseVersion(v)
	}
	var t workspace.Template
	if err == nil {
		t, err = ts.Get(r.Context(), r.PathValue("name"), version)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func parseVersion(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: template version %q: want a number from 1, or latest", workspace.ErrBadInput, v)
	}
	return n, nil
}

func (a *API) templateVersions(w http.ResponseWriter, r *http.Request) {
	ts, err := a.templates()
	var all []workspace.Template
	if err == nil {
		all, err = ts.Versions(r.Context(), r.PathValue("name"))
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, all)
}

func (a *API) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	ts, err := a.templates()
	var versions []workspace.Template
	if err == nil {
		versions, err = ts.Versions(r.Context(), r.PathValue("name"))
	}
	if err == nil {
		err = ts.Delete(r.Context(), r.PathValue("name"))
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	dropped := map[string]bool{}
	for _, v := range versions {
		if v.Files != "" && !dropped[v.Files] {
			dropped[v.Files] = true
			a.dropArchive(r.Context(), v.Files)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// templateFiles makes t's files from the workspace t.From names (as ws
// fork takes them: stopped or archived), taking its image, command and spec
// too when t gives none; it returns the archive it wrote.
func (a *API) templateFiles(ctx context.Context, t *workspace.Template) (string, error) {
	fk, err := a.forker()
	if err != nil {
		return "", err
	}
	src, err := a.store.Lookup(ctx, t.From, "")
	if err != nil {
		return "", err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	key := workspace.TemplateFilesPrefix + t.Name + "/" + id.String() + "/home.tar.zst"
	if err := a.copyFiles(ctx, fk, src, "", key); err != nil {
		return "", err
	}
	if t.Image == "" && t.Command == "" && specIsZero(t.Spec) {
		t.Image, t.Command, t.Spec = src.Image, src.Command, src.Spec
		t.Spec.Template = nil
	}
	t.Files, t.From = key, ""
	return key, nil
}

func specIsZero(s workspace.Spec) bool {
	return len(s.Env) == 0 && s.CPUs == 0 && s.Memory == 0 && s.Pids == 0 && !s.HTTP && len(s.Apps) == 0
}

// fromTemplate turns a create naming a template into the workspace it
// makes: the template's latest version filled with n.Params.
func (a *API) fromTemplate(ctx context.Context, n workspace.NewWorkspace) (workspace.Template, workspace.NewWorkspace, error) {
	if n.Image != "" || n.Command != "" || !specIsZero(n.Spec) {
		return workspace.Template{}, n, fmt.Errorf("%w: a workspace made from template %q takes its image, command, env, apps and limits from it (change the template, or give params)", workspace.ErrBadInput, n.Template)
	}
	ts, err := a.templates()
	var t workspace.Template
	if err == nil {
		t, err = ts.Get(ctx, n.Template, 0)
	}
	if err != nil {
		return t, n, err
	}
	made, err := t.Instantiate(n.Name, n.Params)
	if err != nil {
		return t, n, err
	}
	made.Desired, made.Owner = n.Desired, n.Owner
	return t, made, nil
}

// withTemplateFiles gives made, a cold create from t, a copy of t's files
// (if it has some) to start from.
func (a *API) withTemplateFiles(ctx context.Context, t workspace.Template, made workspace.NewWorkspace) (workspace.NewWorkspace, error) {
	if t.Files == "" {
		return made, nil
	}
	fk, err := a.forker()
	if err != nil {
		return made, fmt.Errorf("template %s has files: %w", t.Name, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return made, err
	}
	made.ID, made.ArchiveKey = id.String(), provider.ArchiveKey(id.String(), "template")
	return made, fk.CopyArchive(ctx, t.Files, made.ArchiveKey)
}

// moveTemplate turns an update's template_version into the fields it
// sets: ws's template at that version, filled with ws's parameters.
func (a *API) moveTemplate(ctx context.Context, ws workspace.Workspace, u workspace.SpecUpdate) (workspace.SpecUpdate, error) {
	ref := ws.Spec.Template
	if ref == nil {
		return u, fmt.Errorf("%w: workspace %s was made from no template", workspace.ErrBadInput, ws.Name)
	}
	if !onlyTemplateVersion(u) {
		return u, fmt.Errorf("%w: template_version goes alone: the template sets the image, command, env and limits", workspace.ErrBadInput)
	}
	version := 0
	ts, err := a.templates()
	if err == nil && u.TemplateVersion != "latest" {
		version, err = parseVersion(u.TemplateVersion)
	}
	var t workspace.Template
	if err == nil {
		t, err = ts.Get(ctx, ref.Name, version)
	}
	var n workspace.NewWorkspace
	if err == nil {
		n, err = t.Instantiate(ws.Name, ref.Params)
	}
	if err != nil {
		return u, err
	}
	s := n.Spec
	s.Apps = keepShares(s.Apps, ws.Spec)
	return workspace.SpecUpdate{Image: &n.Image, Command: &n.Command, Env: &s.Env, CPUs: &s.CPUs, Memory: &s.Memory,
		Pids: &s.Pids, HTTP: &s.HTTP, Apps: &s.Apps, Template: s.Template}, nil
}

// keepShares is apps (a template version's) with the share levels the
// workspace's apps of the same names have: who reaches an app does not
// change under its owner by a move to another version (neither wider nor
// narrower); main's level is kept even if the version does not name main.
func keepShares(apps []workspace.App, had workspace.Spec) []workspace.App {
	out := slices.Clone(apps)
	for _, old := range had.Apps {
		if old.Share == "" {
			continue
		}
		i := slices.IndexFunc(out, func(a workspace.App) bool { return a.Name == old.Name })
		switch {
		case i >= 0:
			out[i].Share = old.Share
		case old.Name == workspace.DefaultApp:
			out = append(out, old)
		}
	}
	return out
}

func onlyTemplateVersion(u workspace.SpecUpdate) bool {
	return u.Image == nil && u.Command == nil && u.Env == nil && len(u.EnvSet) == 0 && len(u.EnvUnset) == 0 &&
		u.CPUs == nil && u.Memory == nil && u.Pids == nil && u.HTTP == nil && u.Template == nil &&
		u.Apps == nil && len(u.AppSet) == 0 && len(u.AppUnset) == 0
}

// fillTemplates sets TemplateLatest on the workspaces whose template has a
// newer version (one read of the latest versions for all of them).
func (a *API) fillTemplates(ctx context.Context, all []workspace.Workspace) {
	if a.cfg.Templates == nil {
		return
	}
	used := false
	for _, w := range all {
		used = used || w.Spec.Template != nil
	}
	if !used {
		return
	}
	latest, err := a.cfg.Templates.Latest(ctx)
	if err != nil {
		a.log.Warn("workspace api: template versions", "err", err)
		return
	}
	for i, w := range all {
		if ref := w.Spec.Template; ref != nil && latest[ref.Name] > ref.Version {
			all[i].TemplateLatest = latest[ref.Name]
		}
	}
}
