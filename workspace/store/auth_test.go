package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// The running quota holds under contention: rounds of 40 concurrent ups
// of 40 different workspaces of one owner, through two stores (two
// connection pools, as two replicas) on each database, with one slot,
// admit exactly one per round.
func TestQuotaIsRaceFree(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			dsn := b.DSN(t)
			stores := []*store.Store{storetest.Open(t, dsn), storetest.Open(t, dsn)}
			q := auth.Quotas{Running: 1}
			now := time.Now()
			var ids []string
			for i := range 40 {
				w, err := stores[0].CreateWithin(ctx, workspace.NewWorkspace{Name: fmt.Sprintf("w%d", i), Owner: "alice"}, q, now)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, w.ID)
			}
			for round := range 5 {
				start := make(chan struct{})
				errs := make([]error, len(ids))
				var wg sync.WaitGroup
				for i, id := range ids {
					wg.Go(func() {
						<-start
						_, errs[i] = stores[i%2].SetDesiredWithin(ctx, id, workspace.Running, q, time.Now())
					})
				}
				close(start)
				wg.Wait()
				admitted := ""
				for i, err := range errs {
					var qe *auth.QuotaError
					switch {
					case err == nil && admitted != "":
						t.Fatalf("round %d: %s and %s both admitted with one slot", round, admitted, ids[i])
					case err == nil:
						admitted = ids[i]
					case !errors.As(err, &qe) || qe.Limit != 1 || qe.Count != 1:
						t.Fatalf("round %d: up %d: %v; want a QuotaError of limit 1, count 1", round, i, err)
					}
				}
				if admitted == "" {
					t.Fatalf("round %d: nothing admitted", round)
				}
				if _, err := stores[0].SetDesired(ctx, admitted, workspace.Standby, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			// The slot moving between two workspaces while a third asks:
			// A down, A up again, B up, at once, over and over.
			a, b := ids[0], ids[1]
			if _, err := stores[0].SetDesiredWithin(ctx, a, workspace.Running, q, time.Now()); err != nil {
				t.Fatal(err)
			}
			for round := range 30 {
				var wg sync.WaitGroup
				for i, step := range []struct {
					id string
					to workspace.Status
				}{{a, workspace.Standby}, {a, workspace.Running}, {b, workspace.Running}} {
					wg.Go(func() { stores[i%2].SetDesiredWithin(ctx, step.id, step.to, q, time.Now()) })
				}
				wg.Wait()
				n := 0
				for _, id := range []string{a, b} {
					if w, _ := stores[0].Get(ctx, id); w.DesiredState == workspace.Running {
						n++
					}
				}
				if n > 1 {
					t.Fatalf("round %d: %d workspaces desired RUNNING with one slot", round, n)
				}
				stores[0].SetDesired(ctx, b, workspace.Standby, time.Now())
				stores[0].SetDesiredWithin(ctx, a, workspace.Running, q, time.Now())
			}
		})
	}
}
