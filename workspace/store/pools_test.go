package store_test

import (
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// members prepares n pool members of t.
func members(t *testing.T, tp workspace.Template, n int) []workspace.NewWorkspace {
	t.Helper()
	out := make([]workspace.NewWorkspace, n)
	for i := range out {
		m, err := tp.PoolMember(uuid.Must(uuid.NewV7()).String())
		if err != nil {
			t.Fatal(err)
		}
		out[i] = m
	}
	return out
}

// runAll marks every member of pool name observed RUNNING, as the
// reconciler and the monitor would.
func runAll(t *testing.T, st *store.Store, ids []string) {
	t.Helper()
	for _, id := range ids {
		storetest.Force(t, st, id, map[string]any{"observed_status": "RUNNING"})
	}
}

func wantStatus(t *testing.T, st *store.Store, name string, version int, want workspace.PoolStatus) {
	t.Helper()
	got, err := st.Pools().Status(t.Context(), name, version)
	want.Template, want.Version = name, version
	if err != nil || got != want {
		t.Fatalf("pool %s: %+v, %v; want %+v", name, got, err, want)
	}
}

// TestPoolRefillAndClaim: a refill adds what the pool lacks and no more;
// only a ready member is claimed, becoming the claimer's under its quota;
// a template update drains the old version's members and refills with the
// new one; a smaller size trims; deleting the template drops the pool.
func TestPoolRefillAndClaim(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.Now()
			v1, err := st.Templates().Put(ctx, pyTemplate("serve --port {{.port}}"), true, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Pools().SetSize(ctx, "nope", 3, now); !errors.Is(err, workspace.ErrNotFound) {
				t.Fatalf("pool of an unknown template: %v; want ErrNotFound", err)
			}
			if err := st.Pools().SetSize(ctx, v1.Name, 3, now); err != nil {
				t.Fatal(err)
			}
			r, err := st.Pools().Refill(ctx, v1.Name, 1, 3, members(t, v1, 5), now)
			if err != nil || len(r.Created) != 3 || len(r.Unused) != 2 || len(r.Drained) != 0 {
				t.Fatalf("refill: %+v, %v; want 3 created, 2 unused", r, err)
			}
			wantStatus(t, st, v1.Name, 1, workspace.PoolStatus{Size: 3, Starting: 3})
			claim, err := v1.Instantiate("a1", nil)
			if err != nil {
				t.Fatal(err)
			}
			claim.Owner, claim.Desired = "alice", workspace.Running
			if w, ok, err := st.Pools().Claim(ctx, claim, auth.Quotas{}, workspace.PoolClaim{}, now); ok || err != nil {
				t.Fatalf("claim before any member runs: %+v, %v, %v; want a miss", w, ok, err)
			}
			runAll(t, st, r.Created)
			wantStatus(t, st, v1.Name, 1, workspace.PoolStatus{Size: 3, Ready: 3})
			w, ok, err := st.Pools().Claim(ctx, claim, auth.Quotas{Workspaces: 1}, workspace.PoolClaim{}, now)
			if !ok || err != nil || w.Owner != "alice" || w.Name != "a1" || w.DesiredState != workspace.Running ||
				w.ObservedStatus != workspace.Running || w.Spec.Template == nil || w.Spec.Template.Version != 1 {
				t.Fatalf("claim: %+v, %v, %v", w, ok, err)
			}
			wantStatus(t, st, v1.Name, 1, workspace.PoolStatus{Size: 3, Ready: 2})
			claim.Name = "a2"
			var qe *auth.QuotaError
			if _, ok, err := st.Pools().Claim(ctx, claim, auth.Quotas{Workspaces: 1}, workspace.PoolClaim{}, now); ok || !errors.As(err, &qe) {
				t.Fatalf("claim over quota: %v, %v; want a QuotaError", ok, err)
			}
			claim.Name = "a1"
			if _, ok, err := st.Pools().Claim(ctx, claim, auth.Quotas{}, workspace.PoolClaim{}, now); ok || !errors.Is(err, workspace.ErrNameTaken) {
				t.Fatalf("claim of a taken name: %v, %v; want ErrNameTaken", ok, err)
			}
			wantStatus(t, st, v1.Name, 1, workspace.PoolStatus{Size: 3, Ready: 2})

			if d, err := st.Pools().Deficit(ctx, v1.Name, 1, 3); err != nil || d != 1 {
				t.Fatalf("deficit after a claim: %d, %v; want 1", d, err)
			}
			r, err = st.Pools().Refill(ctx, v1.Name, 1, 3, members(t, v1, 1), now)
			if err != nil || len(r.Created) != 1 {
				t.Fatalf("refill after a claim: %+v, %v", r, err)
			}
			v2, err := st.Templates().Put(ctx, pyTemplate("serve2 --port {{.port}}"), false, now)
			if err != nil {
				t.Fatal(err)
			}
			r, err = st.Pools().Refill(ctx, v2.Name, 2, 3, members(t, v2, 3), now)
			if err != nil || len(r.Drained) != 3 || len(r.Created) != 3 {
				t.Fatalf("refill after a template update: %+v, %v; want 3 drained, 3 created", r, err)
			}
			wantStatus(t, st, v2.Name, 2, workspace.PoolStatus{Size: 3, Starting: 3, Draining: 3})
			runAll(t, st, r.Created[:1])
			if err := st.Pools().SetSize(ctx, v2.Name, 1, now); err != nil {
				t.Fatal(err)
			}
			r, err = st.Pools().Refill(ctx, v2.Name, 2, 1, nil, now)
			if err != nil || len(r.Drained) != 2 {
				t.Fatalf("refill to a smaller size: %+v, %v; want 2 drained", r, err)
			}
			wantStatus(t, st, v2.Name, 2, workspace.PoolStatus{Size: 1, Ready: 1, Draining: 5})

			if err := st.Templates().Delete(ctx, v2.Name); !errors.Is(err, workspace.ErrConflict) {
				t.Fatalf("delete while alice's claimed workspace uses it: %v; want ErrConflict", err)
			}
			if _, err := st.SetDesired(ctx, w.ID, workspace.Deleted, now); err != nil {
				t.Fatal(err)
			}
			if err := st.Templates().Delete(ctx, v2.Name); err != nil {
				t.Fatalf("delete with only pool members left: %v", err)
			}
			if sizes, err := st.Pools().Sizes(ctx); err != nil || len(sizes) != 0 {
				t.Fatalf("pools after the template's delete: %v, %v", sizes, err)
			}
			wantStatus(t, st, v2.Name, 2, workspace.PoolStatus{Draining: 6})
		})
	}
}

// TestPoolClaimsRace: 60 claims at once, each by its own owner, against 20
// ready members: each member goes to exactly one claimer, the other 40
// miss, none fails.
func TestPoolClaimsRace(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.Now()
			tp, err := st.Templates().Put(ctx, pyTemplate("serve"), true, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Pools().SetSize(ctx, tp.Name, 20, now); err != nil {
				t.Fatal(err)
			}
			r, err := st.Pools().Refill(ctx, tp.Name, 1, 20, members(t, tp, 20), now)
			if err != nil {
				t.Fatal(err)
			}
			runAll(t, st, r.Created)
			var mu sync.Mutex
			got := map[string]string{}
			misses := 0
			var wg sync.WaitGroup
			for i := range 60 {
				wg.Go(func() {
					n, err := tp.Instantiate("w", nil)
					if err != nil {
						t.Error(err)
						return
					}
					n.Owner, n.Desired = fmt.Sprintf("o%d", i), workspace.Running
					q := auth.Quotas{Running: 5} // a transaction with the quota check
					if i%3 == 0 {
						q = auth.Quotas{} // on SQLite: one statement (claimOne)
					}
					w, ok, err := st.Pools().Claim(ctx, n, q, workspace.PoolClaim{Adopt: i%2 == 0}, now)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Errorf("claim %d: %v", i, err)
					case !ok:
						misses++
					case got[w.ID] != "":
						t.Errorf("member %s handed to %s and %s", w.ID, got[w.ID], n.Owner)
					case w.Owner != n.Owner:
						t.Errorf("claim %d: owner %q", i, w.Owner)
					default:
						got[w.ID] = n.Owner
					}
				})
			}
			wg.Wait()
			if len(got) != 20 || misses != 40 {
				t.Fatalf("%d claimed, %d missed; want 20 and 40", len(got), misses)
			}
			for id := range got {
				if !slices.Contains(r.Created, id) {
					t.Fatalf("claimed %s, which is no member", id)
				}
			}
			wantStatus(t, st, tp.Name, 1, workspace.PoolStatus{Size: 20})
			// The claims with adopt (even owners) wait for their adoption.
			pending, err := st.Pools().PendingAdoptions(ctx)
			want := 0
			for _, owner := range got {
				var i int
				fmt.Sscanf(owner, "o%d", &i)
				if i%2 == 0 {
					want++
				}
			}
			if err != nil || len(pending) != want {
				t.Fatalf("pending adoptions: %d, %v; want %d", len(pending), err, want)
			}
			for _, a := range pending {
				if got[a.ID] != a.Owner {
					t.Fatalf("pending adoption %+v: the claim was %s's", a, got[a.ID])
				}
				if err := st.Pools().Adopted(ctx, a.ID); err != nil {
					t.Fatal(err)
				}
			}
			if pending, err := st.Pools().PendingAdoptions(ctx); err != nil || len(pending) != 0 {
				t.Fatalf("pending adoptions after Adopted: %v, %v", pending, err)
			}
		})
	}
}

// TestRefillRespectsDeletesAndClaims: a refill that raced its template's
// delete adds nothing (its prepared members come back unused), nor after a
// SetSize(0) it read too late; on Postgres, a trim waiting on a member
// that a claim holds leaves it alone once the claim commits.
func TestRefillRespectsDeletesAndClaims(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			dsn := b.DSN(t)
			st := storetest.Open(t, dsn)
			now := time.Now()
			tp, err := st.Templates().Put(ctx, pyTemplate("serve"), true, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Pools().SetSize(ctx, tp.Name, 2, now); err != nil {
				t.Fatal(err)
			}
			r, err := st.Pools().Refill(ctx, tp.Name, 1, 2, members(t, tp, 2), now)
			if err != nil || len(r.Created) != 2 {
				t.Fatalf("refill: %+v, %v", r, err)
			}
			runAll(t, st, r.Created)
			if err := st.Pools().SetSize(ctx, tp.Name, 0, now); err != nil {
				t.Fatal(err)
			}
			if b.Name == "postgres" {
				db := storetest.DB(t, dsn)
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, `SELECT id FROM workspaces WHERE id = $1 FOR UPDATE`, r.Created[0]); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					_, err := st.Pools().Refill(ctx, tp.Name, 1, 2, nil, now) // size 0 now: trims both
					done <- err
				}()
				// The refill waits on the held row; the "claim" commits.
				waitLocked(t, db)
				if _, err := tx.ExecContext(ctx, `UPDATE workspaces SET pool = NULL, pool_version = NULL, owner = 'alice' WHERE id = $1`, r.Created[0]); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if w, err := st.Get(ctx, r.Created[0]); err != nil || w.DesiredState != workspace.Running || w.Owner != "alice" {
					t.Fatalf("the member claimed while the trim waited: %s %s, %v; want alice's, RUNNING", w.Owner, w.DesiredState, err)
				}
			}
			if err := st.Templates().Delete(ctx, tp.Name); err != nil && !errors.Is(err, workspace.ErrConflict) {
				t.Fatal(err)
			}
			if b.Name == "sqlite" {
				prepared := members(t, tp, 2)
				r, err := st.Pools().Refill(ctx, tp.Name, 1, 2, prepared, now)
				if err != nil || len(r.Created) != 0 || len(r.Unused) != 2 {
					t.Fatalf("a refill after the template's delete: %+v, %v; want nothing added, both unused", r, err)
				}
			}
		})
	}
}

// waitLocked waits until a session of db waits on a lock.
func waitLocked(t *testing.T, db *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n)
		if n > 0 {
			return
		}
		runtime.Gosched()
	}
	t.Fatal("no session waited on the held row")
}

// TestPoolClaimRestart: a claim whose parameters change only the env
// (workspace.Template.Claims: restart) takes a member with its new env and
// a restart pending, which makes it actionable (the reconciler's sweep
// finds it: STOPPING, then STARTING); the claim of any operation clears
// it. Both claim paths: with a quota (a transaction) and without (SQLite:
// one statement).
func TestPoolClaimRestart(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.Now()
			v1, err := st.Templates().Put(ctx, pyTemplate("serve"), true, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Pools().SetSize(ctx, v1.Name, 2, now); err != nil {
				t.Fatal(err)
			}
			r, err := st.Pools().Refill(ctx, v1.Name, 1, 2, members(t, v1, 2), now)
			if err != nil || len(r.Created) != 2 {
				t.Fatalf("refill: %+v, %v", r, err)
			}
			runAll(t, st, r.Created)
			for i, q := range []auth.Quotas{{}, {Workspaces: 5}} {
				port := fmt.Sprint(9000 + i)
				n, err := v1.Instantiate(fmt.Sprint("r", i), map[string]string{"port": port})
				if err != nil {
					t.Fatal(err)
				}
				n.Owner, n.Desired = "alice", workspace.Running
				if ok, restart := v1.Claims(n); !ok || !restart {
					t.Fatalf("Claims of an env-only parameter: %v, %v; want a claim with a restart", ok, restart)
				}
				w, ok, err := st.Pools().Claim(ctx, n, q, workspace.PoolClaim{Restart: true}, now)
				if !ok || err != nil || !w.RestartPending || !slices.Contains(w.Env, "APP_PORT="+port) || w.ObservedStatus != workspace.Running {
					t.Fatalf("claim with a restart (quotas %+v): %+v, %v, %v; want RUNNING, restart pending, APP_PORT=%s", q, w, ok, err, port)
				}
				ids, err := st.ListActionableIDs(ctx)
				if err != nil || !slices.Contains(ids, w.ID) {
					t.Fatalf("actionable after the claim: %v, %v; want %s in it", ids, err, w.ID)
				}
				if d := workspace.Decide(w, workspace.Observation{}, now, workspace.Policy{Owner: "me"}); d.Action != workspace.ActClaim || d.Op != workspace.OpStopping {
					t.Fatalf("decision on a restart pending: %+v; want a claim of STOPPING", d)
				}
				if ok, err := st.Claim(ctx, w, workspace.OpStopping, fmt.Sprint("op-", i), "me", now, now.Add(time.Minute)); !ok || err != nil {
					t.Fatalf("claim of STOPPING: %v, %v", ok, err)
				}
				got, err := st.Get(ctx, w.ID)
				if err != nil || got.RestartPending || got.Operation != workspace.OpStopping {
					t.Fatalf("after the STOPPING claim: %+v, %v; want the restart cleared", got, err)
				}
			}
		})
	}
}
