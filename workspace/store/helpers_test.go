package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store"
)

func describe(w workspace.Workspace) string {
	return fmt.Sprintf("observed=%s desired=%s op=%s err=%d info=%+v", w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorCount, w.ErrorInfo)
}

// createN creates n workspaces named b0, b1, … at now.
func createN(t *testing.T, st *store.Store, n int, now time.Time) []workspace.Workspace {
	t.Helper()
	ws := make([]workspace.Workspace, n)
	for i := range ws {
		w, err := st.Create(t.Context(), workspace.NewWorkspace{Name: fmt.Sprint("b", i)}, now)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	return ws
}
