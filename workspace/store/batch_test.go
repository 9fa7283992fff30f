package store_test

import (
	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstype"

	"fmt"
	"sync"
	"testing"
	"time"
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
						ok, err := st.Claim(ctx, w, wstype.OpProvisioning, "op-"+owner, owner, now, now.Add(time.Minute))
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
					// Takes the next workspace's name: a unique violation.
					_, err := st.Exec(ctx, `UPDATE workspaces SET name = ? WHERE id = ?`, fmt.Sprint("b", (i+1)%n), w.ID)
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
			got := make([]wstype.Workspace, n)
			errs := make([]error, n)
			for i, w := range ws {
				wg.Add(1)
				go func() { defer wg.Done(); got[i], errs[i] = st.Get(ctx, w.ID) }()
			}
			wg.Wait()
			for i, w := range ws {
				if errs[i] != nil || got[i].ID != w.ID || got[i].Name != w.Name || got[i].Operation != wstype.OpProvisioning {
					t.Fatalf("Get(%s) = %s name=%s, %v", w.ID, describe(got[i]), got[i].Name, errs[i])
				}
			}
		})
	}
}

// TestUrgentWriteGoesAheadOfBulk: with thousands of bulk writes queued, a
// write under an Urgent context completes while most of them still wait:
// it never queues behind them (on SQLite the single writer takes it
// between two statements of the batch in hand; on Postgres it runs
// alone), and it takes effect like any other.
func TestUrgentWriteGoesAheadOfBulk(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			now := time.UnixMilli(1_700_000_000_000)
			const bulk = 8000
			ws := createN(t, st, 65, now) // the bulk writes the first 64, the user the last
			var done sync.WaitGroup
			var mu sync.Mutex
			finished := 0
			for i := range bulk {
				done.Go(func() {
					if err := st.Touch(ctx, ws[i%64].ID, now); err != nil {
						t.Error(err)
					}
					mu.Lock()
					finished++
					mu.Unlock()
				})
			}
			// Let the bulk writes queue up and the first batches start.
			testutil.WaitFor(t, 10*time.Second, "the bulk to start", func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				return finished > 0, "none finished"
			})
			w, err := st.SetDesired(store.Urgent(ctx), ws[64].ID, wstype.Running, now)
			mu.Lock()
			ahead := finished
			mu.Unlock()
			done.Wait()
			if err != nil || w.DesiredState != wstype.Running {
				t.Fatalf("urgent write: %v (desired %s)", err, w.DesiredState)
			}
			t.Logf("the urgent write completed after %d of %d bulk writes", ahead, bulk)
			if ahead > bulk/2 {
				t.Errorf("the urgent write waited for %d of %d bulk writes queued before it", ahead, bulk)
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
			concurrently := func(fns ...func(w wstype.Workspace) (bool, error)) []int {
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
				func(w wstype.Workspace) (bool, error) {
					return st.Claim(ctx, w, wstype.OpProvisioning, "op-"+w.ID, "r1", now, lease)
				},
				func(w wstype.Workspace) (bool, error) {
					stale := w
					stale.OpID = "an older op"
					return st.Claim(ctx, stale, wstype.OpProvisioning, "op2-"+w.ID, "r2", now, lease)
				})
			if wins[0] != n || wins[1] != 0 {
				t.Fatalf("claims won %v, want [%d 0]", wins, n)
			}
			renewed := lease.Add(time.Minute)
			retry := now.Add(time.Hour)
			info := &wstype.ErrorInfo{Reason: wstype.ReasonActionFailed, ErrorCount: 2, LastError: "boom"}
			wins = concurrently(
				func(w wstype.Workspace) (bool, error) { return st.Renew(ctx, w.ID, "op-"+w.ID, "r1", renewed) },
				func(w wstype.Workspace) (bool, error) { return st.Renew(ctx, w.ID, "op-"+w.ID, "r2", renewed) },
				func(w wstype.Workspace) (bool, error) {
					return true, st.Failed(ctx, w.ID, "op-"+w.ID, 2, info, now, nil)
				},
				func(w wstype.Workspace) (bool, error) {
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
				func(w wstype.Workspace) (bool, error) {
					w.OpID = "op-" + w.ID
					return st.Complete(ctx, w, now)
				},
				func(w wstype.Workspace) (bool, error) {
					w.OpID = "op-" + w.ID
					return st.Complete(ctx, w, now)
				},
				func(w wstype.Workspace) (bool, error) {
					w.OpID = "another op"
					return st.Complete(ctx, w, now)
				})
			if wins[0]+wins[1] != n || wins[2] != 0 {
				t.Fatalf("completions won %v, want %d in all of the first two, none of the third", wins, n)
			}
		})
	}
}
