package api

import (
	"fmt"
	"net/http"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
)

// Snapshots over the API:
//
//	GET  /v1/workspaces/{id}/archives  the workspace's archives, newest first
//	POST /v1/workspaces/{id}/restore   {"archive": KEY}: the next restore uses KEY
//
// Every ARCHIVING operation writes a new archive; the leader's ArchiveGC
// keeps the newest --keep-archives of each workspace and the one its next
// restore uses.

// RestoreRequest is the body of POST /v1/workspaces/{id}/restore.
type RestoreRequest struct {
	Archive string `json:"archive"`
}

func (a *API) archiveStore() (provider.ArchiveStore, error) {
	as, ok := a.cfg.Storage.(provider.ArchiveStore)
	if !ok {
		return nil, fmt.Errorf("%w: this server's storage does not keep archives", workspace.ErrBadInput)
	}
	return as, nil
}

func (a *API) archives(w http.ResponseWriter, r *http.Request) {
	ws, err := a.lookup(r)
	var as provider.ArchiveStore
	if err == nil {
		as, err = a.archiveStore()
	}
	var list []provider.ArchiveInfo
	if err == nil {
		list, err = as.Archives(r.Context(), ws.ID)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	for i := range list {
		list[i].Current = list[i].Key == ws.ArchiveKey
	}
	if list == nil {
		list = []provider.ArchiveInfo{}
	}
	writeJSON(w, http.StatusOK, list)
}

func (a *API) restore(w http.ResponseWriter, r *http.Request) {
	var req RestoreRequest
	err := decode(r, &req)
	var ws workspace.Workspace
	if err == nil {
		ws, err = a.lookup(r)
	}
	var as provider.ArchiveStore
	if err == nil {
		as, err = a.archiveStore()
	}
	if err == nil {
		err = a.checkArchive(r, as, ws, req.Archive)
	}
	if err == nil {
		ws, err = a.store.ChooseArchive(r.Context(), ws.ID, req.Archive, a.clock.Now())
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	noteDetail(r, "archive "+req.Archive)
	a.hints.Publish(r.Context(), hints.ChanWorkspace, ws.ID)
	writeJSON(w, http.StatusOK, a.fill(ws))
}

// checkArchive accepts key only if it is a committed archive of ws. (Its
// checksum is checked by the restore itself, which refuses a mismatch.)
func (a *API) checkArchive(r *http.Request, as provider.ArchiveStore, ws workspace.Workspace, key string) error {
	if key == "" {
		return fmt.Errorf("%w: restore needs an archive key (gantry ws archives %s lists them)", workspace.ErrBadInput, ws.ID)
	}
	list, err := as.Archives(r.Context(), ws.ID)
	if err != nil {
		return err
	}
	for _, ar := range list {
		if ar.Key == key && ar.Committed {
			return nil
		}
	}
	return fmt.Errorf("%w: workspace %s has no committed archive %q (gantry ws archives %s lists them)", workspace.ErrNotFound, ws.ID, key, ws.ID)
}
