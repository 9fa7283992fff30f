package reconcile

import (
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// A database made by the previous release (the schema up to migration
// 0100: no owners, no tokens, names unique across the table) opens with
// today's code: its workspaces belong to the admin, keep their names and
// states, and converge; another owner does not see them.
func TestUpgradeFromPreviousSchema(t *testing.T) {
	for _, b := range wstest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			dsn := b.DSN(t)
			old, err := store.OpenAtVersion(ctx, dsn, 100)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now().UnixMilli()
			rows := map[string]workspace.Status{"old-a": workspace.Running, "old-b": workspace.Standby, "old-c": workspace.Running}
			ids := map[string]string{}
			for name, desired := range rows {
				id := "0000-" + name
				ids[name] = id
				if _, err := storetest.Exec(t, dsn, `INSERT INTO workspaces (id, name, image, command, desired_state, observed_status, created_at, updated_at)
					VALUES (?, ?, '', 'exec sleep 600', ?, 'PENDING', ?, ?)`, id, name, string(desired), now, now); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := storetest.Exec(t, dsn, `INSERT INTO tokens (id) VALUES ('x')`); err == nil {
				t.Fatal("the old schema already has a tokens table: not the previous release's")
			}
			old.Close()

			st := wstest.OpenStore(t, dsn)
			for name, id := range ids {
				w, err := st.Get(ctx, id)
				if err != nil || w.Owner != workspace.AdminOwner || w.Name != name || w.DesiredState != rows[name] {
					t.Fatalf("%s after the upgrade: %+v, %v; want owner admin", name, w, err)
				}
			}
			h := startHarness(t, st, fake.New(time.Millisecond), hints.NewLocal(), Config{})
			defer h.stop()
			for name, id := range ids {
				h.waitState(t, id, rows[name], 30*time.Second)
			}

			env := wstest.NewAPIEnv(t, st, api.APIConfig{})
			all, err := env.Client(env.Admin).List(ctx)
			if err != nil || len(all) != len(rows) {
				t.Fatalf("the admin lists %d workspaces (%v), want %d", len(all), err, len(rows))
			}
			alice := env.Client(storetest.Token(t, st, "alice", false))
			if mine, err := alice.List(ctx); err != nil || len(mine) != 0 {
				t.Fatalf("alice lists %v (%v), want none", mine, err)
			}
			var ae *client.APIError
			if _, err := alice.Get(ctx, "old-a"); !errors.As(err, &ae) || ae.Status != 404 {
				t.Fatalf("alice gets the admin's old-a: %v, want 404", err)
			}
			// Names are now per owner: alice may use one the admin has.
			if _, err := alice.Create(ctx, workspace.NewWorkspace{Name: "old-a"}); err != nil {
				t.Fatalf("alice's own old-a: %v", err)
			}
		})
	}
}
