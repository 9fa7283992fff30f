package store_test

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// TestReconcileWritesAreHeapOnly (Postgres): the six writes that take a
// workspace from PENDING to RUNNING mostly stay heap-only (HOT): no index
// of the table covers a column they change, so Postgres need not add an
// index entry per write. With an index on operation or a status (the old
// actionable index) at most the two "executed" writes of the six were.
func TestReconcileWritesAreHeapOnly(t *testing.T) {
	ctx := t.Context()
	dsn := storetest.PostgresDSN(t)
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	now := time.UnixMilli(1_700_000_000_000)
	lease := now.Add(time.Minute)
	ok := func(what string, w workspace.Workspace, done bool, err error) {
		t.Helper()
		if err != nil || !done {
			t.Fatalf("%s %s: %v %v", what, w.ID, done, err)
		}
	}
	for i := range n {
		w, err := st.Create(ctx, workspace.NewWorkspace{Name: fmt.Sprint("h", i), Desired: workspace.Running}, now)
		if err != nil {
			t.Fatal(err)
		}
		// PROVISIONING to STANDBY, then STARTING to RUNNING: each claimed,
		// executed, and ended by the observation of its target.
		for _, stage := range []struct {
			op workspace.Operation
			to workspace.Status
		}{{workspace.OpProvisioning, workspace.Standby}, {workspace.OpStarting, workspace.Running}} {
			opID := fmt.Sprint(stage.op, i)
			done, err := st.Claim(ctx, w, stage.op, opID, "me", now, lease)
			ok("claim", w, done, err)
			ok("executed", w, true, st.Executed(ctx, w.ID, opID, now))
			w.Operation, w.OpID, w.OpExecuted = stage.op, opID, true
			done, err = st.SetObservedComplete(ctx, w, stage.to, now)
			ok("observed", w, done, err)
			w.ObservedStatus, w.Operation, w.OpExecuted = stage.to, workspace.OpNone, false
		}
	}
	st.Close() // its server processes report their counts as they exit

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var upd, hot int64
	// The server reports its counts on its own schedule.
	testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("the server to count %d updates", 6*n), func() (bool, string) {
		err := db.QueryRowContext(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relname = 'workspaces' AND schemaname = current_schema()`).Scan(&upd, &hot)
		if err != nil {
			t.Fatal(err)
		}
		return upd >= 6*n, fmt.Sprintf("%d updates", upd)
	})
	if share := float64(hot) / float64(upd); share < 0.8 {
		t.Fatalf("%d of %d updates heap-only (%.0f%%), want at least 80%%", hot, upd, 100*share)
	}
	t.Logf("%d of %d updates heap-only", hot, upd)
}
