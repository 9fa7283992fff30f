package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// TestStoreConformance runs the same checks on SQLite and on Postgres.
func TestStoreConformance(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			dsn := b.DSN(t)
			st := storetest.Open(t, dsn)
			// Migrations are idempotent: opening again applies nothing twice.
			st2 := storetest.Open(t, dsn)
			now := time.UnixMilli(1_700_000_000_000)

			w, err := st.Create(ctx, workspace.NewWorkspace{Name: "alpha", Command: "sleep 1"}, now)
			if err != nil {
				t.Fatal(err)
			}
			if w.ObservedStatus != workspace.Pending || w.DesiredState != workspace.Standby || w.Operation != workspace.OpNone || w.ArchiveKey != "" {
				t.Fatalf("new workspace: %s", describe(w))
			}
			if _, err := st.Create(ctx, workspace.NewWorkspace{Name: "alpha"}, now); !errors.Is(err, workspace.ErrNameTaken) {
				t.Fatalf("duplicate name: err = %v, want ErrNameTaken", err)
			}
			for _, bad := range []workspace.NewWorkspace{{Name: ""}, {Name: "a/b"}, {Name: "x", Desired: "FLYING"}} {
				if _, err := st.Create(ctx, bad, now); !errors.Is(err, workspace.ErrBadInput) {
					t.Fatalf("Create(%+v) err = %v, want ErrBadInput", bad, err)
				}
			}
			if _, err := st.Get(ctx, "nope"); !errors.Is(err, workspace.ErrNotFound) {
				t.Fatalf("Get(unknown) = %v", err)
			}
			if got, err := st2.Get(ctx, "alpha"); err != nil || got.ID != w.ID {
				t.Fatalf("Get by name = %v, %v", got.ID, err)
			}
			act, _ := st.ListActionable(ctx)
			if len(act) != 1 {
				t.Fatalf("actionable = %d, want 1 (PENDING wants STANDBY)", len(act))
			}

			// Two claimers race the CAS: exactly one wins.
			wins := 0
			for _, owner := range []string{"r1", "r2"} {
				ok, err := st.Claim(ctx, w, workspace.OpProvisioning, "op-"+owner, owner, now, now.Add(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					wins++
				}
			}
			if wins != 1 {
				t.Fatalf("CAS winners = %d, want 1", wins)
			}
			cur, _ := st.Get(ctx, w.ID)
			if cur.Operation != workspace.OpProvisioning || cur.OpID != "op-r1" || cur.OpOwner != "r1" {
				t.Fatalf("after claim: %s op_id=%s owner=%s", describe(cur), cur.OpID, cur.OpOwner)
			}
			// Another replica cannot acquire while the lease holds; can after.
			if ok, _ := st.Acquire(ctx, w.ID, "op-r1", cur.ErrorCount, "r2", now, now.Add(time.Second)); ok {
				t.Fatal("acquired under a live lease")
			}
			later := now.Add(2 * time.Second)
			if ok, _ := st.Acquire(ctx, w.ID, "op-r1", cur.ErrorCount+1, "r2", later, later.Add(time.Second)); ok {
				t.Fatal("acquired from a row older than its last failure (error count)")
			}
			if ok, _ := st.Acquire(ctx, w.ID, "op-r1", cur.ErrorCount, "r2", later, later.Add(time.Second)); !ok {
				t.Fatal("could not take over an expired lease")
			}
			// A stale observation (started under another op) is dropped.
			stale := cur
			stale.Operation, stale.OpID = workspace.OpNone, ""
			if ok, _ := st.SetObserved(ctx, stale, workspace.Standby, later); ok {
				t.Fatal("SetObserved across an operation boundary succeeded")
			}
			if ok, _ := st.SetObserved(ctx, cur, workspace.Standby, later); !ok {
				t.Fatal("SetObserved failed")
			}
			next := later.Add(time.Minute)
			info := &workspace.ErrorInfo{Reason: "ActionFailed", Operation: workspace.OpProvisioning, ErrorCount: 1, LastError: "boom", OccurredAt: later.UTC()}
			if err := st.Failed(ctx, w.ID, "op-r1", 1, info, later, &next); err != nil {
				t.Fatal(err)
			}
			cur, _ = st.Get(ctx, w.ID)
			if cur.ErrorCount != 1 || cur.ErrorInfo == nil || cur.ErrorInfo.LastError != "boom" || cur.NextRetryAt == nil || !cur.NextRetryAt.Equal(next) {
				t.Fatalf("after Failed: %s next=%v", describe(cur), cur.NextRetryAt)
			}
			other := cur
			other.OpID = "op-other"
			if ok, _ := st.Complete(ctx, other, later); ok {
				t.Fatal("Complete with the wrong op_id succeeded")
			}
			moved := cur
			moved.DesiredState = workspace.Standby
			if cur.DesiredState == workspace.Standby {
				moved.DesiredState = workspace.Running
			}
			if ok, _ := st.Complete(ctx, moved, later); ok {
				t.Fatal("Complete decided from a desired state the row no longer shows succeeded")
			}
			if ok, _ := st.Complete(ctx, cur, later); !ok {
				t.Fatal("Complete failed")
			}
			cur, _ = st.Get(ctx, w.ID)
			if cur.Operation != workspace.OpNone || cur.ErrorCount != 0 || cur.ErrorInfo != nil || cur.OpID != "op-r1" {
				t.Fatalf("after Complete: %s op_id=%s", describe(cur), cur.OpID)
			}
			if act, _ := st.ListActionable(ctx); len(act) != 0 {
				t.Fatalf("converged workspace still actionable")
			}
			if _, err := st.SetDesired(ctx, w.ID, workspace.Running, later); err != nil {
				t.Fatal(err)
			}
			if act, _ := st.ListActionable(ctx); len(act) != 1 {
				t.Fatalf("desired change not actionable")
			}
			// Timeout keeps the operation; Recover clears it.
			if ok, _ := st.Claim(ctx, workspace.Workspace{ID: w.ID, ObservedStatus: workspace.Standby, DesiredState: workspace.Running, OpID: "stale"}, workspace.OpStarting, "op-2", "r1", later, later); ok {
				t.Fatal("claim from a stale snapshot (old op_id) succeeded")
			}
			if ok, _ := st.Claim(ctx, workspace.Workspace{ID: w.ID, ObservedStatus: workspace.Standby, DesiredState: workspace.Running, OpID: "op-r1"}, workspace.OpStarting, "op-2", "r1", later, later); !ok {
				t.Fatal("claim failed")
			}
			st.Terminal(ctx, w.ID, "op-2", &workspace.ErrorInfo{Reason: "Timeout", Operation: workspace.OpStarting, IsTerminal: true}, later)
			cur, _ = st.Get(ctx, w.ID)
			if cur.ErrorInfo == nil || !cur.ErrorInfo.IsTerminal || cur.PreviousStatus != workspace.Standby || cur.Operation != workspace.OpStarting {
				t.Fatalf("after Terminal: %s prev=%s", describe(cur), cur.PreviousStatus)
			}
			cur, err = st.Recover(ctx, w.ID, later)
			if err != nil || cur.ErrorInfo != nil || cur.Operation != workspace.OpNone || cur.ErrorCount != 0 || cur.OpID != "op-2" {
				t.Fatalf("after Recover: %s (%v)", describe(cur), err)
			}
			if _, err := st.Recover(ctx, "nope", later); !errors.Is(err, workspace.ErrNotFound) {
				t.Fatalf("Recover(unknown) = %v", err)
			}
			all, _ := st.List(ctx)
			if len(all) != 1 {
				t.Fatalf("List = %d rows", len(all))
			}
			plan, err := st.ExplainActionable(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.ToLower(plan), "workspaces_actionable") && b.Name == "sqlite" {
				t.Fatalf("actionable query does not use the partial index:\n%s", plan)
			}
		})
	}
}

// TestObservedClearsObserveFailed: a status written after a failed
// observation also clears the monitor's own error info, never the
// reconciler's.
func TestObservedClearsObserveFailed(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.UnixMilli(1_700_000_000_000)
			ws := createN(t, st, 2, now)
			w := ws[0]
			failed := &workspace.ErrorInfo{Reason: workspace.ReasonObserveFailed, LastError: "engine down"}
			if ok, err := st.SetObserveError(ctx, w.ID, failed, now); err != nil || !ok {
				t.Fatalf("SetObserveError = %v, %v", ok, err)
			}
			later := now.Add(time.Second)
			if ok, err := st.SetObserved(ctx, w, workspace.Standby, later); err != nil || !ok {
				t.Fatalf("SetObserved = %v, %v", ok, err)
			}
			got, err := st.Get(ctx, w.ID)
			if err != nil || got.ErrorInfo != nil || got.ObservedStatus != workspace.Standby || !got.UpdatedAt.Equal(later) {
				t.Fatalf("after the observation: %s updated %v, %v", describe(got), got.UpdatedAt, err)
			}

			// The reconciler's error info stays.
			o := ws[1]
			if ok, err := st.Claim(ctx, o, workspace.OpProvisioning, "op1", "r1", now, now.Add(time.Minute)); err != nil || !ok {
				t.Fatalf("Claim = %v, %v", ok, err)
			}
			info := &workspace.ErrorInfo{Reason: workspace.ReasonActionFailed, ErrorCount: 1, LastError: "boom"}
			if err := st.Failed(ctx, o.ID, "op1", 1, info, now, nil); err != nil {
				t.Fatal(err)
			}
			o.Operation, o.OpID = workspace.OpProvisioning, "op1"
			if ok, err := st.SetObserved(ctx, o, workspace.Standby, later); err != nil || !ok {
				t.Fatalf("SetObserved = %v, %v", ok, err)
			}
			if got, err := st.Get(ctx, o.ID); err != nil || got.ErrorInfo == nil || got.ErrorInfo.LastError != "boom" {
				t.Fatalf("the reconciler's error info after an observation: %s, %v", describe(got), err)
			}
		})
	}
}

// TestObservationEndsExecutedOperation: SetObservedComplete records the
// status and ends the operation in one write only while the row holds that
// operation, executed, without error info and with the archive key the
// caller saw; any other row is left as it was, for the caller's plain
// observation.
func TestObservationEndsExecutedOperation(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.UnixMilli(1_700_000_000_000)
			later := now.Add(time.Second)
			ws := createN(t, st, 4, now)
			claim := func(w workspace.Workspace, opID string) workspace.Workspace {
				t.Helper()
				if ok, err := st.Claim(ctx, w, workspace.OpProvisioning, opID, "r1", now, now.Add(time.Minute)); err != nil || !ok {
					t.Fatalf("Claim = %v, %v", ok, err)
				}
				w.Operation, w.OpID = workspace.OpProvisioning, opID
				return w
			}
			ends := func(what string, w workspace.Workspace, want bool) {
				t.Helper()
				before, err := st.Get(ctx, w.ID)
				if err != nil {
					t.Fatal(err)
				}
				ok, err := st.SetObservedComplete(ctx, w, workspace.Standby, later)
				if err != nil || ok != want {
					t.Fatalf("%s: SetObservedComplete = %v, %v; want %v", what, ok, err, want)
				}
				got, err := st.Get(ctx, w.ID)
				if err != nil {
					t.Fatal(err)
				}
				if !want {
					if describe(got) != describe(before) {
						t.Fatalf("%s: the row changed: %s, was %s", what, describe(got), describe(before))
					}
					return
				}
				if got.ObservedStatus != workspace.Standby || got.ObservedAt == nil || !got.ObservedAt.Equal(later) ||
					got.Operation != workspace.OpNone || got.OpExecuted || got.OpOwner != "" || got.OpLeaseUntil != nil ||
					got.OpID != w.OpID || got.ErrorCount != 0 || got.ErrorInfo != nil || !got.UpdatedAt.Equal(later) {
					t.Fatalf("%s: after the write: %s", what, describe(got))
				}
			}

			// Executed: ended, once.
			w := claim(ws[0], "op0")
			if err := st.Executed(ctx, w.ID, "op0", now); err != nil {
				t.Fatal(err)
			}
			ends("executed", w, true)
			ends("already ended", w, false)

			// Claimed but not executed: the call may still be running.
			w = claim(ws[1], "op1")
			ends("not executed", w, false)
			if err := st.Executed(ctx, w.ID, "op1", now); err != nil {
				t.Fatal(err)
			}
			stale := w
			stale.OpID = "op-older"
			ends("another operation", stale, false)
			ends("executed after all", w, true)

			// Error info: the reconciler decides.
			w = claim(ws[2], "op2")
			info := &workspace.ErrorInfo{Reason: workspace.ReasonActionFailed, ErrorCount: 1, LastError: "boom"}
			if err := st.Failed(ctx, w.ID, "op2", 1, info, now, nil); err != nil {
				t.Fatal(err)
			}
			if err := st.Executed(ctx, w.ID, "op2", now); err != nil {
				t.Fatal(err)
			}
			ends("error info", w, false)

			// An archive key other than the one seen.
			w = claim(ws[3], "op3")
			if err := st.Executed(ctx, w.ID, "op3", now); err != nil {
				t.Fatal(err)
			}
			if err := st.SetArchiveKey(ctx, w.ID, "op3", "archives/x", now); err != nil {
				t.Fatal(err)
			}
			ends("another archive key", w, false)
			w.ArchiveKey = "archives/x"
			ends("the archive key seen", w, true)
		})
	}
}

// TestStatesLeaveTheSpecOut: States and ListStates read every workspace's
// state (what the live hub's resync and the monitor's pass need) without
// its image, command or spec; States stops when its caller does.
func TestStatesLeaveTheSpecOut(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.Now()
			for i := range 3 {
				n := workspace.NewWorkspace{Name: fmt.Sprint("w", i), Owner: "alice", Image: "img", Command: "serve",
					Desired: workspace.Running, Spec: workspace.Spec{Env: []string{"A=1"}, CPUs: 1}}
				if _, err := st.Create(ctx, n, now); err != nil {
					t.Fatal(err)
				}
			}
			check := func(how string, w workspace.Workspace) {
				if w.ID == "" || w.Owner != "alice" || w.DesiredState != workspace.Running || w.ObservedStatus != workspace.Pending ||
					w.Image != "" || w.Command != "" || len(w.Env) != 0 || w.CPUs != 0 || w.CreatedAt.IsZero() {
					t.Fatalf("%s: %+v; want the state without the spec", how, w)
				}
			}
			var got int
			for w, err := range st.States(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				check("States", w)
				got++
			}
			all, err := st.ListStates(ctx)
			if err != nil || got != 3 || len(all) != 3 {
				t.Fatalf("States: %d rows, ListStates: %d, %v; want 3", got, len(all), err)
			}
			for _, w := range all {
				check("ListStates", w)
			}
			for range st.States(ctx) {
				break // the rows close: the next read must not block
			}
			if _, err := st.Get(ctx, all[0].ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDeleteFinishedBeforeTheReadBack: a workspace the reconciler deletes
// between SetDesired(DELETED)'s write and its read back (one with nothing
// to tear down goes at once) was deleted as asked: no "not found". Any
// other desired state of a row gone meanwhile is still not found.
func TestDeleteFinishedBeforeTheReadBack(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.UnixMilli(1_700_000_000_000)
			ws := createN(t, st, 2, now)
			store.SetAfterSetDesired(st, func(id string) {
				if _, err := store.Exec(ctx, st, `DELETE FROM workspaces WHERE id = ?`, id); err != nil {
					t.Error(err)
				}
			})
			got, err := st.SetDesired(ctx, ws[0].ID, workspace.Deleted, now)
			if err != nil || got.ID != ws[0].ID || got.DesiredState != workspace.Deleted {
				t.Fatalf("SetDesired(DELETED) of a row the reconciler deleted at once = %s, %v; want it deleted, no error", describe(got), err)
			}
			if _, err := st.SetDesired(ctx, ws[1].ID, workspace.Standby, now); !errors.Is(err, workspace.ErrNotFound) {
				t.Fatalf("SetDesired(STANDBY) of a row deleted meanwhile = %v, want not found", err)
			}
		})
	}
}
