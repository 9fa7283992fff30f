package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/wstype"
)

func describe(w wstype.Workspace) string {
	return fmt.Sprintf("observed=%s desired=%s op=%s err=%d info=%+v", w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorCount, w.ErrorInfo)
}

// createN creates n workspaces named b0, b1, … at now.
func createN(t *testing.T, st *store.Store, n int, now time.Time) []wstype.Workspace {
	t.Helper()
	ws := make([]wstype.Workspace, n)
	for i := range ws {
		w, err := st.Create(t.Context(), wstype.NewWorkspace{Name: fmt.Sprint("b", i)}, now)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	return ws
}
