package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
)

// Fork: POST /v1/workspaces/{id}/fork {"name", "desired_state", "archive"}
// → 201, a new workspace of the caller's with the source's image, command
// and spec whose files are a copy of the source's, taken from one
// consistent state:
//
//	STANDBY (nothing runs)  a fresh snapshot of its volume, checked after
//	                        the copy: had the workspace moved meanwhile
//	                        (a start), the fork is refused (409, retry)
//	PENDING (archived)      a copy of the archive its next restore uses
//	"archive": KEY|latest   a copy of that archive of the source's (any
//	                        state: the way to fork a RUNNING workspace)
//
// A RUNNING workspace is refused without "archive": its files change under
// a copy. The new workspace starts with its own archive (under its own id),
// so its first operation is a restore and the two never share files. Quotas
// apply as for a create.

// ForkRequest is the body of POST /v1/workspaces/{id}/fork.
type ForkRequest struct {
	Name         string `json:"name"`
	DesiredState string `json:"desired_state,omitempty"`
	Archive      string `json:"archive,omitempty"`
}

func (a *API) fork(w http.ResponseWriter, r *http.Request) {
	var req ForkRequest
	err := decode(r, &req)
	var src workspace.Workspace
	if err == nil {
		src, err = a.lookup(r)
	}
	var made workspace.Workspace
	if err == nil {
		made, err = a.forkOf(r.Context(), src, req)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	noteWorkspace(r, made.ID)
	a.hints.Publish(r.Context(), hints.ChanWorkspace, made.ID)
	writeJSON(w, http.StatusCreated, a.fill(made))
}

// forker is the server's storage as a provider.Forker, or an error if it
// cannot copy a workspace's files (as archiveStore is for archives).
func (a *API) forker() (provider.Forker, error) {
	fk, ok := a.cfg.Storage.(provider.Forker)
	if !ok {
		return nil, fmt.Errorf("%w: this server's storage cannot copy a workspace's files", workspace.ErrBadInput)
	}
	return fk, nil
}

func (a *API) forkOf(ctx context.Context, src workspace.Workspace, req ForkRequest) (workspace.Workspace, error) {
	fk, err := a.forker()
	if err != nil {
		return src, err
	}
	p, _ := auth.FromContext(ctx)
	n := workspace.NewWorkspace{Name: req.Name, Image: src.Image, Command: src.Command, Spec: src.Spec,
		Desired: workspace.Status(req.DesiredState), Owner: p.Owner}
	if err := n.Validate(); err != nil {
		return src, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return src, err
	}
	n.ID = id.String()
	n.ArchiveKey = provider.ArchiveKey(n.ID, "fork")
	if err := a.copyFiles(ctx, fk, src, req.Archive, n.ArchiveKey); err != nil {
		return src, err
	}
	made, err := a.store.CreateWithin(ctx, n, a.cfg.Quotas, a.clock.Now())
	if err != nil {
		a.dropArchive(ctx, n.ArchiveKey)
	}
	return made, err
}

// copyFiles writes src's files, from the state the fork takes them from,
// as the archive under key.
func (a *API) copyFiles(ctx context.Context, fk provider.Forker, src workspace.Workspace, archive, key string) error {
	idle := src.Operation == workspace.OpNone && src.ErrorInfo == nil
	switch {
	case archive != "":
		from, err := a.sourceArchive(ctx, src, archive)
		if err != nil {
			return err
		}
		return fk.CopyArchive(ctx, from, key)
	case idle && src.ObservedStatus == workspace.Pending && src.ArchiveKey != "":
		return fk.CopyArchive(ctx, src.ArchiveKey, key)
	case idle && src.ObservedStatus == workspace.Standby && src.DesiredState != workspace.Running:
		return a.snapshotStopped(ctx, fk, src, key)
	}
	return fmt.Errorf("%w: workspace %s is %s (operation %s): its files change under a copy; stop it (ws down) or give an archive of it (--archive latest)",
		workspace.ErrConflict, src.Name, src.ObservedStatus, src.Operation)
}

// snapshotStopped writes the files of src, STANDBY, as the archive under
// key, and drops it if src moved meanwhile (a start: its files may have
// changed under the copy).
func (a *API) snapshotStopped(ctx context.Context, fk provider.Forker, src workspace.Workspace, key string) error {
	if err := fk.Snapshot(ctx, src.ID, key); err != nil {
		return err
	}
	now, err := a.store.Get(ctx, src.ID)
	if err == nil && (now.ObservedStatus != workspace.Standby || now.Operation != workspace.OpNone || now.OpID != src.OpID) {
		err = fmt.Errorf("%w: workspace %s changed while its files were copied (now %s, %s); fork it again", workspace.ErrConflict, src.Name, now.ObservedStatus, now.Operation)
	}
	if err != nil {
		a.dropArchive(ctx, key)
	}
	return err
}

// sourceArchive is the key of src's archive named by archive: "latest"
// (its newest committed one) or a key of its.
func (a *API) sourceArchive(ctx context.Context, src workspace.Workspace, archive string) (string, error) {
	as, err := a.archiveStore()
	var list []provider.ArchiveInfo
	if err == nil {
		list, err = as.Archives(ctx, src.ID)
	}
	if err != nil {
		return "", err
	}
	for _, ai := range list {
		if ai.Committed && (archive == "latest" || ai.Key == archive) {
			return ai.Key, nil
		}
	}
	return "", fmt.Errorf("%w: workspace %s has no committed archive %q (ws archives %s)", workspace.ErrNotFound, src.Name, archive, src.Name)
}

// dropArchive removes a fork's archive that no workspace got.
func (a *API) dropArchive(ctx context.Context, key string) {
	if as, ok := a.cfg.Storage.(provider.ArchiveStore); ok {
		if err := as.DeleteArchive(context.WithoutCancel(ctx), key); err != nil {
			a.log.Warn("workspace api: fork: removing an unused copy", "key", key, "err", err)
		}
	}
}
