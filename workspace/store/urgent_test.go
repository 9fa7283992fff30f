package store_test

import (
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// TestBulkYieldsToUrgentWork: while a user's work is in flight (the
// Gate's BeginUrgent), bulk writes and reads wait and urgent ones do not;
// when it ends the bulk goes on at once; and a hold that never ends delays
// the bulk by the gate's bound only.
func TestBulkYieldsToUrgentWork(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			dsn := b.DSN(t)
			// A store per bound, on the one database.
			open := func(maxYield time.Duration) (*store.Store, *urgency.Gate) {
				g := urgency.NewGate(maxYield)
				return storetest.OpenWith(t, dsn, store.Options{Gate: g}), g
			}
			st, gate := open(time.Hour) // never ends on its own here
			ws := createN(t, st, 2, time.UnixMilli(1_700_000_000_000))
			bulkWrite := func(st *store.Store) error {
				_, err := store.Exec(ctx, st, `UPDATE workspaces SET updated_at = updated_at + 1 WHERE id = ?`, ws[0].ID)
				return err
			}
			bulkRead := func(st *store.Store) error { _, err := st.Get(ctx, ws[0].ID); return err }
			// Bulk work about to start (a reconcile step) waits the same way.
			bulkStart := func(*store.Store) error { gate.AwaitNone(); return nil }
			for _, bulk := range []struct {
				name string
				do   func(*store.Store) error
			}{{"write", bulkWrite}, {"read", bulkRead}, {"start", bulkStart}} {
				end := gate.BeginUrgent()
				if got := gate.InFlight(); got != 1 {
					t.Fatalf("InFlight = %d, want 1", got)
				}
				done := make(chan error, 1)
				go func() { done <- bulk.do(st) }()
				// The user's own statements pass meanwhile.
				uctx := urgency.Mark(ctx)
				if _, err := store.Exec(uctx, st, `UPDATE workspaces SET updated_at = updated_at + 1 WHERE id = ?`, ws[1].ID); err != nil {
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
				if got := gate.InFlight(); got != 0 {
					t.Fatalf("InFlight = %d after end, want 0", got)
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
			// With nothing in flight the bulk never waits: 20 writes and
			// reads would take 20 seconds if each waited a second.
			st, _ = open(time.Second)
			t0 := time.Now()
			for range 10 {
				if err := bulkWrite(st); err != nil {
					t.Fatal(err)
				}
				if err := bulkRead(st); err != nil {
					t.Fatal(err)
				}
			}
			if el := time.Since(t0); el > 5*time.Second {
				t.Fatalf("20 bulk statements with nothing urgent took %s", el)
			}
			// A hold that does not end delays each batch by the bound only.
			st, gate = open(100 * time.Millisecond)
			end := gate.BeginUrgent()
			defer end()
			for _, bulk := range []struct {
				name string
				do   func(*store.Store) error
			}{{"write", bulkWrite}, {"read", bulkRead}} {
				t0 = time.Now()
				if err := bulk.do(st); err != nil {
					t.Fatal(err)
				}
				if el := time.Since(t0); el < 100*time.Millisecond || el > 5*time.Second {
					t.Fatalf("bulk %s under a hold that never ends took %s, want the 100ms bound", bulk.name, el)
				}
			}
		})
	}
}
