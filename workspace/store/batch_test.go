package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// TestStoreBatchesKeepEachOutcome: many concurrent statements, batched by
// the store, each keep the outcome they would have alone: of two racing
// claims per workspace exactly one wins, a statement that fails on the
// server (a name clash) fails alone without taking its batch with it, and
// concurrent reads return each its own row.
func TestStoreBatchesKeepEachOutcome(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.UnixMilli(1_700_000_000_000)
			const n = 64
			ws := createN(t, st, n, now)
			s0 := st.BatchStats()
			start := make(chan struct{})
			// The first statement waits until every caller has been let go,
			// so the next batches find callers waiting however loaded the
			// machine is (a batch takes the callers waiting at that moment).
			var entered atomic.Int64
			allIn := make(chan struct{})
			enter := func() {
				if entered.Add(1) == 3*n {
					close(allIn)
				}
			}
			store.SetBeforeBulk(st, func() {
				select {
				case <-allIn:
				case <-time.After(10 * time.Second):
				}
			})
			var wg sync.WaitGroup
			var mu sync.Mutex
			wins := map[string]int{}
			renameErrs := 0
			var firstErr error
			for i, w := range ws {
				for _, owner := range []string{"r1", "r2"} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						enter()
						ok, err := st.Claim(ctx, w, workspace.OpProvisioning, "op-"+owner, owner, now, now.Add(time.Minute))
						mu.Lock()
						defer mu.Unlock()
						if err != nil && firstErr == nil {
							firstErr = err
						}
						if ok {
							wins[w.ID]++
						}
					}()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					enter()
					// Takes the next workspace's name: a unique violation.
					_, err := store.Exec(ctx, st, `UPDATE workspaces SET name = ? WHERE id = ?`, fmt.Sprint("b", (i+1)%n), w.ID)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						renameErrs++
					}
				}()
			}
			close(start)
			wg.Wait()
			if firstErr != nil {
				t.Fatalf("a claim failed: %v", firstErr)
			}
			for _, w := range ws {
				if wins[w.ID] != 1 {
					t.Fatalf("workspace %s: %d claim winners, want 1", w.ID, wins[w.ID])
				}
			}
			if renameErrs != n {
				t.Fatalf("%d of %d clashing renames failed, want all", renameErrs, n)
			}
			s1 := st.BatchStats()
			if stmts, batches := s1.WriteStmts-s0.WriteStmts, s1.WriteBatches-s0.WriteBatches; batches >= stmts {
				t.Fatalf("%d statements in %d batches: nothing was batched", stmts, batches)
			}

			// Concurrent reads: each gets its own row, as written.
			got := make([]workspace.Workspace, n)
			errs := make([]error, n)
			for i, w := range ws {
				wg.Add(1)
				go func() { defer wg.Done(); got[i], errs[i] = st.Get(ctx, w.ID) }()
			}
			wg.Wait()
			for i, w := range ws {
				if errs[i] != nil || got[i].ID != w.ID || got[i].Name != w.Name || got[i].Operation != workspace.OpProvisioning {
					t.Fatalf("Get(%s) = %s name=%s, %v", w.ID, describe(got[i]), got[i].Name, errs[i])
				}
			}
		})
	}
}

// TestUrgentWriteGoesAheadOfBulk: with thousands of bulk writes queued, a
// write under an Urgent context completes while they still wait: it never
// queues behind them. On SQLite the single writer takes it between two
// statements of the batch in hand (each bulk statement is slowed to 2 ms
// here, so the count of those begun meanwhile measures the wait); on
// Postgres it runs alone, so it completes while the bulk batch in hand is
// held back altogether. It takes effect like any other write.
func TestUrgentWriteGoesAheadOfBulk(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.UnixMilli(1_700_000_000_000)
			const bulk = 2000
			ws := createN(t, st, 65, now) // the bulk writes the first 64, the user the last
			hold := b.Name == "postgres"
			var begun atomic.Int64 // bulk statements (SQLite) or batches (Postgres) begun
			gate := make(chan struct{})
			store.SetBeforeBulk(st, func() {
				begun.Add(1)
				select {
				case <-gate:
				default:
					if hold {
						<-gate
					} else {
						// Each bulk statement takes this long, so the count
						// begun while the urgent write runs measures its wait.
						time.Sleep(2 * time.Millisecond) // real time: a slow statement
					}
				}
			})
			var done sync.WaitGroup
			defer done.Wait()
			var once sync.Once
			open := func() { once.Do(func() { close(gate) }) }
			defer open()
			for i := range bulk {
				done.Go(func() {
					if err := st.Touch(ctx, ws[i%64].ID, now); err != nil {
						t.Error(err)
					}
				})
			}
			// Each write loop (Postgres has two) holds bulk work before the
			// urgent write starts, so none begins it later by mere
			// scheduling.
			loops := int64(store.WriteLoops(st))
			testutil.WaitFor(t, 10*time.Second, "the bulk to start", func() (bool, string) {
				return begun.Load() >= loops, fmt.Sprintf("%d of %d write loops began bulk work", begun.Load(), loops)
			})
			before := begun.Load()
			uctx, cancel := context.WithTimeout(urgency.Mark(ctx), 10*time.Second)
			defer cancel()
			w, err := st.SetDesired(uctx, ws[64].ID, workspace.Running, now)
			meanwhile := begun.Load() - before
			open()
			if err != nil || w.DesiredState != workspace.Running {
				t.Fatalf("urgent write: %v (desired %s)", err, w.DesiredState)
			}
			t.Logf("bulk statements or batches begun while the urgent write ran: %d", meanwhile)
			if limit := map[bool]int64{true: 0, false: 64}[hold]; meanwhile > limit {
				t.Errorf("the urgent write waited while %d bulk statements or batches began (at most %d)", meanwhile, limit)
			}
		})
	}
}

// TestBatchedShapesKeepEachCompareAndSet: statements of one shape that
// share a batch (on Postgres, one UPDATE … FROM unnest per shape) keep
// each its own compare-and-set and its own rows affected, also with a
// second statement of the same row in the batch, and write NULLs and
// numbers as the one-row statement would.
func TestBatchedShapesKeepEachCompareAndSet(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.UnixMilli(1_700_000_000_000)
			const n = 64
			ws := createN(t, st, n, now)
			// concurrently runs, for each workspace, every fn and returns
			// how many reported true, by fn.
			concurrently := func(fns ...func(w workspace.Workspace) (bool, error)) []int {
				var wg sync.WaitGroup
				var mu sync.Mutex
				got := make([]int, len(fns))
				for _, w := range ws {
					for i, fn := range fns {
						wg.Go(func() {
							ok, err := fn(w)
							if err != nil {
								t.Error(err)
							}
							mu.Lock()
							defer mu.Unlock()
							if ok {
								got[i]++
							}
						})
					}
				}
				wg.Wait()
				return got
			}
			lease := now.Add(time.Minute)
			wins := concurrently(
				func(w workspace.Workspace) (bool, error) {
					return st.Claim(ctx, w, workspace.OpProvisioning, "op-"+w.ID, "r1", now, lease)
				},
				func(w workspace.Workspace) (bool, error) {
					stale := w
					stale.OpID = "an older op"
					return st.Claim(ctx, stale, workspace.OpProvisioning, "op2-"+w.ID, "r2", now, lease)
				})
			if wins[0] != n || wins[1] != 0 {
				t.Fatalf("claims won %v, want [%d 0]", wins, n)
			}
			renewed := lease.Add(time.Minute)
			retry := now.Add(time.Hour)
			info := &workspace.ErrorInfo{Reason: workspace.ReasonActionFailed, ErrorCount: 2, LastError: "boom"}
			wins = concurrently(
				func(w workspace.Workspace) (bool, error) { return st.Renew(ctx, w.ID, "op-"+w.ID, "r1", renewed) },
				func(w workspace.Workspace) (bool, error) { return st.Renew(ctx, w.ID, "op-"+w.ID, "r2", renewed) },
				func(w workspace.Workspace) (bool, error) {
					return true, st.Failed(ctx, w.ID, "op-"+w.ID, 2, info, now, nil)
				},
				func(w workspace.Workspace) (bool, error) {
					return true, st.Failed(ctx, w.ID, "another op", 5, nil, now, &retry)
				})
			if wins[0] != n || wins[1] != 0 {
				t.Fatalf("renewals won %v, want [%d 0 …]", wins[:2], n)
			}
			for _, w := range ws {
				got, err := st.Get(ctx, w.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.ErrorCount != 2 || got.ErrorInfo == nil || got.ErrorInfo.LastError != "boom" || got.NextRetryAt != nil ||
					got.OpLeaseUntil == nil || !got.OpLeaseUntil.Equal(renewed) || got.OpOwner != "r1" || got.OpID != "op-"+w.ID {
					t.Fatalf("%s after the batch: %s next=%v lease=%v owner=%s op_id=%s", w.ID, describe(got), got.NextRetryAt, got.OpLeaseUntil, got.OpOwner, got.OpID)
				}
			}
			wins = concurrently(
				func(w workspace.Workspace) (bool, error) {
					w.OpID = "op-" + w.ID
					return st.Complete(ctx, w, now)
				},
				func(w workspace.Workspace) (bool, error) {
					w.OpID = "op-" + w.ID
					return st.Complete(ctx, w, now)
				},
				func(w workspace.Workspace) (bool, error) {
					w.OpID = "another op"
					return st.Complete(ctx, w, now)
				})
			if wins[0]+wins[1] != n || wins[2] != 0 {
				t.Fatalf("completions won %v, want %d in all of the first two, none of the third", wins, n)
			}
		})
	}
}
