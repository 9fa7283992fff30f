package store_test

import (
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// TestBulkYieldsToUrgentWork: while a user's work is in flight
// (BeginUrgent), bulk writes and reads wait and urgent ones do not; when it
// ends the bulk goes on at once; and a hold that never ends delays the bulk
// by the bound only.
func TestBulkYieldsToUrgentWork(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			store.SetMaxYield(st, time.Hour) // never ends on its own here
			ws := createN(t, st, 2, time.UnixMilli(1_700_000_000_000))
			bulkWrite := func() error {
				_, err := st.Exec(ctx, `UPDATE workspaces SET updated_at = updated_at + 1 WHERE id = ?`, ws[0].ID)
				return err
			}
			bulkRead := func() error { _, err := st.Get(ctx, ws[0].ID); return err }
			// Bulk work about to start (a reconcile step) waits the same way.
			bulkStart := func() error { st.AwaitNoUrgent(); return nil }
			for _, bulk := range []struct {
				name string
				do   func() error
			}{{"write", bulkWrite}, {"read", bulkRead}, {"start", bulkStart}} {
				end := st.BeginUrgent()
				if got := st.UrgentInFlight(); got != 1 {
					t.Fatalf("UrgentInFlight = %d, want 1", got)
				}
				done := make(chan error, 1)
				go func() { done <- bulk.do() }()
				// The user's own statements pass meanwhile.
				uctx := urgency.Mark(ctx)
				if _, err := st.Exec(uctx, `UPDATE workspaces SET updated_at = updated_at + 1 WHERE id = ?`, ws[1].ID); err != nil {
					t.Fatal(err)
				}
				if _, err := st.Get(uctx, ws[1].ID); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					t.Fatalf("bulk %s ran while urgent work was in flight (err %v)", bulk.name, err)
				case <-time.After(50 * time.Millisecond): // real time: long enough for a batch to run
				}
				end()
				end() // a second end does nothing
				if got := st.UrgentInFlight(); got != 0 {
					t.Fatalf("UrgentInFlight = %d after end, want 0", got)
				}
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("bulk %s still waiting after the urgent work ended", bulk.name)
				}
			}
			// With nothing in flight the bulk never waits: 30 writes, reads
			// and starts would take 30 seconds if each waited a second.
			store.SetMaxYield(st, time.Second)
			t0 := time.Now()
			for range 10 {
				st.AwaitNoUrgent()
				if err := bulkWrite(); err != nil {
					t.Fatal(err)
				}
				if err := bulkRead(); err != nil {
					t.Fatal(err)
				}
			}
			if el := time.Since(t0); el > 5*time.Second {
				t.Fatalf("30 bulk steps with nothing urgent took %s", el)
			}
			// A hold that does not end delays each batch by the bound only.
			store.SetMaxYield(st, 100*time.Millisecond)
			end := st.BeginUrgent()
			defer end()
			t0 = time.Now()
			if err := bulkWrite(); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(t0); el < 100*time.Millisecond || el > 5*time.Second {
				t.Fatalf("bulk write under a hold that never ends took %s, want the 100ms bound", el)
			}
			t0 = time.Now()
			st.AwaitNoUrgent()
			if el := time.Since(t0); el < 100*time.Millisecond || el > 5*time.Second {
				t.Fatalf("AwaitNoUrgent under a hold that never ends took %s, want the 100ms bound", el)
			}
		})
	}
}
