package memstore_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/memstore"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

// fullStore is every method both stores share.
type fullStore interface {
	Create(ctx ctxT, n workspace.NewWorkspace, now time.Time) (workspace.Workspace, error)
	Get(ctx ctxT, id string) (workspace.Workspace, error)
	List(ctx ctxT) ([]workspace.Workspace, error)
	ListActionable(ctx ctxT) ([]workspace.Workspace, error)
	ListActionableIDs(ctx ctxT) ([]string, error)
	SetDesired(ctx ctxT, id string, desired workspace.Status, now time.Time) (workspace.Workspace, error)
	MarkDeleted(ctx ctxT, id string, now time.Time) error
	Claim(ctx ctxT, w workspace.Workspace, op workspace.Operation, opID, owner string, now, leaseUntil time.Time) (bool, error)
	Acquire(ctx ctxT, id, opID string, errorCount int, owner string, now, leaseUntil time.Time) (bool, error)
	Renew(ctx ctxT, id, opID, owner string, leaseUntil time.Time) (bool, error)
	Executed(ctx ctxT, id, opID string, now time.Time) error
	SetArchiveKey(ctx ctxT, id, opID, key string, now time.Time) error
	Failed(ctx ctxT, id, opID string, count int, info *workspace.ErrorInfo, now time.Time, next *time.Time) error
	Terminal(ctx ctxT, id, opID string, info *workspace.ErrorInfo, now time.Time) error
	Complete(ctx ctxT, w workspace.Workspace, now time.Time) (bool, error)
	CompleteAndClaim(ctx ctxT, w workspace.Workspace, op workspace.Operation, opID, owner string, now, leaseUntil time.Time) (bool, error)
	Abandon(ctx ctxT, w workspace.Workspace, owner string, now time.Time) (bool, error)
	DeleteRow(ctx ctxT, id, opID string) error
	Recover(ctx ctxT, id string, now time.Time) (workspace.Workspace, error)
	SetObserved(ctx ctxT, w workspace.Workspace, status workspace.Status, now time.Time) (bool, error)
	SetObservedComplete(ctx ctxT, w workspace.Workspace, status workspace.Status, now time.Time) (bool, error)
	SetObserveError(ctx ctxT, id string, info *workspace.ErrorInfo, now time.Time) (bool, error)
	ClearObserveError(ctx ctxT, id string, now time.Time) (bool, error)
	Touch(ctx ctxT, id string, now time.Time) error
	TTLCandidates(ctx ctxT) ([]store.TTLCandidate, error)
	SetDesiredIfVersion(ctx ctxT, id string, from workspace.Status, version int64, to workspace.Status, now time.Time) (bool, error)
}

var (
	_ fullStore = (*store.Store)(nil)
	_ fullStore = (*memstore.Store)(nil)
)

// TestMatchesTheDatabases drives memstore and each real store with the same
// random sequence of writes — stale and fresh compare-and-sets, leases,
// failures, observations, TTL writes, deletes — and checks after every step
// that both answered alike and hold the same rows.
func TestMatchesTheDatabases(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			d := newDiff(t, memstore.New(), storetest.Open(t, b.DSN(t)))
			rng := rand.New(rand.NewPCG(7, 11))
			for step := range 1500 {
				d.now = d.now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				d.randomStep(rng, step)
				d.compare(step)
			}
		})
	}
}
