package reconcile

import (
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// TestArchiveTakeoverOnlyRemovesTheVolume: a replica died after its
// ARCHIVING had committed the archive and recorded the key, before it
// removed the volume. The replica taking over must not write the archive
// again (its key is recorded): it only removes the volume.
func TestArchiveTakeoverOnlyRemovesTheVolume(t *testing.T) {
	ctx := t.Context()
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	fk := fake.New(0)
	now := time.Now()
	w, err := st.Create(ctx, workspace.NewWorkspace{Name: "w", Desired: workspace.Pending}, now)
	if err != nil {
		t.Fatal(err)
	}
	// The world and the row as the dead replica left them: STANDBY with a
	// volume, ARCHIVING op-dead claimed, archive committed, key recorded,
	// lease lapsed.
	if err := fk.Provision(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": workspace.Standby})
	w.ObservedStatus = workspace.Standby
	if ok, err := st.Claim(ctx, w, workspace.OpArchiving, "op-dead", "dead-replica", now, now.Add(-time.Second)); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	key, err := fk.Archive(ctx, w.ID, "op-dead")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetArchiveKey(ctx, w.ID, "op-dead", key, now); err != nil {
		t.Fatal(err)
	}
	h := startHarness(t, st, fk, hints.NewLocal(), Config{Lease: time.Second})
	got := h.waitState(t, w.ID, workspace.Pending, 20*time.Second)
	if got.ArchiveKey != key || got.OpID != "op-dead" {
		t.Fatalf("after takeover: %s key=%s op_id=%s, want key %s of op-dead", wstest.Describe(got), got.ArchiveKey, got.OpID, key)
	}
	if n := fk.Calls(w.ID, fake.Archive); n != 1 {
		t.Fatalf("archive calls = %d, want 1 (the dead replica's)", n)
	}
	if n := fk.Calls(w.ID, fake.DeleteVol); n != 1 {
		t.Fatalf("delete_volume calls = %d, want 1", n)
	}
	if d := fk.Duplicates(); len(d) > 0 {
		t.Fatalf("duplicates: %v", d)
	}
}
