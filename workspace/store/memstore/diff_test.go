package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantryhq/gantry/workspace"
)

type ctxT = context.Context

// diff drives two stores alike. Ids differ between them (fresh UUIDs), so
// workspaces are addressed by name.
type diff struct {
	t     *testing.T
	s     [2]fullStore
	now   time.Time
	names []string
	// stale holds an old snapshot per store and name: a plan made from it
	// must lose its compare-and-set on both.
	stale [2]map[string]workspace.Workspace
}

func newDiff(t *testing.T, a, b fullStore) *diff {
	return &diff{t: t, s: [2]fullStore{a, b}, now: time.UnixMilli(1_750_000_000_000).UTC(),
		stale: [2]map[string]workspace.Workspace{{}, {}}}
}

var statuses = []workspace.Status{workspace.Pending, workspace.Standby, workspace.Running, workspace.Error}
var ops = []workspace.Operation{workspace.OpProvisioning, workspace.OpStarting, workspace.OpStopping, workspace.OpArchiving, workspace.OpDeleting}

// get returns name's row in store i (ok false if gone).
func (d *diff) get(i int, name string) (workspace.Workspace, bool) {
	w, err := d.s[i].Get(d.t.Context(), name)
	return w, err == nil
}

// both runs f on each store with name's row there and checks they agree.
func (d *diff) both(step int, what, name string, f func(i int, w workspace.Workspace) (bool, error)) {
	var res [2]string
	for i := range 2 {
		w, ok := d.get(i, name)
		if !ok {
			res[i] = "gone"
			continue
		}
		got, err := f(i, w)
		res[i] = fmt.Sprint(got, err != nil)
	}
	if res[0] != res[1] {
		d.t.Fatalf("step %d %s %s: memstore %s, database %s", step, what, name, res[0], res[1])
	}
}

func (d *diff) randomStep(rng *rand.Rand, step int) {
	ctx := d.t.Context()
	name := fmt.Sprint("w", rng.IntN(6))
	if !slices.Contains(d.names, name) || rng.IntN(20) == 0 {
		var errs [2]bool
		desired := statuses[rng.IntN(3)]
		for i := range 2 {
			_, err := d.s[i].Create(ctx, workspace.NewWorkspace{Name: name, Desired: desired}, d.now)
			errs[i] = err != nil
		}
		if errs[0] != errs[1] {
			d.t.Fatalf("step %d create %s: errors %v", step, name, errs)
		}
		if !slices.Contains(d.names, name) {
			d.names = append(d.names, name)
		}
		return
	}
	if rng.IntN(4) == 0 { // keep this snapshot: a later plan made from it is stale
		for i := range 2 {
			if w, ok := d.get(i, name); ok {
				d.stale[i][name] = w
			}
		}
	}
	d.apply(rng, step, name)
}

func (d *diff) apply(rng *rand.Rand, step int, name string) {
	ctx := d.t.Context()
	now, lease := d.now, d.now.Add(time.Duration(rng.IntN(10)-3)*time.Second)
	opID := fmt.Sprint("op-", step)
	owner := []string{"a", "b"}[rng.IntN(2)]
	useOwn := rng.IntN(3) > 0 // else a wrong op id
	pick := func(w workspace.Workspace) string {
		if useOwn {
			return w.OpID
		}
		return "other"
	}
	info := &workspace.ErrorInfo{Reason: []string{workspace.ReasonActionFailed, workspace.ReasonObserveFailed}[rng.IntN(2)],
		IsTerminal: rng.IntN(3) == 0, ErrorCount: rng.IntN(4), OccurredAt: now}
	// Both stores must see the same random choices: draw them before both().
	choice, status, op, useStale := rng.IntN(20), statuses[rng.IntN(4)], ops[rng.IntN(len(ops))], rng.IntN(2) == 0
	pickSnap := func(i int, w workspace.Workspace) workspace.Workspace {
		if old, ok := d.stale[i][name]; ok && useStale {
			return old
		}
		return w
	}
	var next *time.Time
	if rng.IntN(2) == 0 {
		n := now.Add(time.Second)
		next = &n
	}
	switch choice {
	case 0:
		d.both(step, "set desired", name, func(i int, w workspace.Workspace) (bool, error) {
			if status == workspace.Error {
				return true, d.s[i].MarkDeleted(ctx, w.ID, now)
			}
			_, err := d.s[i].SetDesired(ctx, w.ID, status, now)
			return true, err
		})
	case 1, 2:
		d.both(step, "claim", name, func(i int, w workspace.Workspace) (bool, error) {
			return d.s[i].Claim(ctx, pickSnap(i, w), op, opID, owner, now, lease)
		})
	case 3:
		d.both(step, "acquire", name, func(i int, w workspace.Workspace) (bool, error) {
			return d.s[i].Acquire(ctx, w.ID, pick(w), w.ErrorCount, owner, now, lease)
		})
	case 4:
		d.both(step, "renew", name, func(i int, w workspace.Workspace) (bool, error) {
			return d.s[i].Renew(ctx, w.ID, pick(w), owner, lease)
		})
	case 5:
		d.both(step, "executed", name, func(i int, w workspace.Workspace) (bool, error) {
			return true, d.s[i].Executed(ctx, w.ID, pick(w), now)
		})
	case 6:
		d.both(step, "archive key", name, func(i int, w workspace.Workspace) (bool, error) {
			return true, d.s[i].SetArchiveKey(ctx, w.ID, pick(w), "key-"+opID, now)
		})
	case 7:
		d.both(step, "failed", name, func(i int, w workspace.Workspace) (bool, error) {
			return true, d.s[i].Failed(ctx, w.ID, pick(w), info.ErrorCount, info, now, next)
		})
	case 8:
		d.both(step, "terminal", name, func(i int, w workspace.Workspace) (bool, error) {
			return true, d.s[i].Terminal(ctx, w.ID, pick(w), info, now)
		})
	case 9:
		d.both(step, "complete", name, func(i int, w workspace.Workspace) (bool, error) {
			w.OpID = pick(w)
			return d.s[i].Complete(ctx, w, now)
		})
	case 10:
		d.both(step, "delete row", name, func(i int, w workspace.Workspace) (bool, error) {
			return true, d.s[i].DeleteRow(ctx, w.ID, pick(w))
		})
	case 11:
		d.both(step, "recover", name, func(i int, w workspace.Workspace) (bool, error) {
			_, err := d.s[i].Recover(ctx, w.ID, now)
			return true, err
		})
	case 12, 13:
		d.both(step, "observed", name, func(i int, w workspace.Workspace) (bool, error) {
			return d.s[i].SetObserved(ctx, pickSnap(i, w), status, now)
		})
	case 14:
		d.both(step, "observe error", name, func(i int, w workspace.Workspace) (bool, error) {
			if useStale {
				return d.s[i].ClearObserveError(ctx, w.ID, now)
			}
			return d.s[i].SetObserveError(ctx, w.ID, info, now)
		})
	case 15:
		d.both(step, "touch", name, func(i int, w workspace.Workspace) (bool, error) {
			return true, d.s[i].Touch(ctx, w.ID, now)
		})
	case 16:
		d.ttlWrite(step, name, status, useStale)
	case 17:
		d.both(step, "complete and claim", name, func(i int, w workspace.Workspace) (bool, error) {
			s := pickSnap(i, w)
			s.OpID = pick(w)
			return d.s[i].CompleteAndClaim(ctx, s, op, opID, owner, now, lease)
		})
	case 18:
		d.both(step, "observed complete", name, func(i int, w workspace.Workspace) (bool, error) {
			s := pickSnap(i, w)
			s.OpID = pick(w)
			return d.s[i].SetObservedComplete(ctx, s, status, now)
		})
	case 19:
		d.both(step, "abandon", name, func(i int, w workspace.Workspace) (bool, error) {
			s := pickSnap(i, w)
			s.OpID = pick(w)
			return d.s[i].Abandon(ctx, s, owner, now)
		})
	}
}

// ttlWrite compares the TTL candidates and runs the TTL manager's CAS
// with the candidate's version (or a stale one).
func (d *diff) ttlWrite(step int, name string, to workspace.Status, stale bool) {
	d.both(step, "ttl cas", name, func(i int, w workspace.Workspace) (bool, error) {
		cs, err := d.s[i].TTLCandidates(d.t.Context())
		if err != nil {
			return false, err
		}
		for _, c := range cs {
			if c.ID == w.ID {
				v := c.Version
				if stale {
					v--
				}
				return d.s[i].SetDesiredIfVersion(d.t.Context(), w.ID, c.Observed, v, to, d.now)
			}
		}
		return false, nil
	})
}

// compare checks both stores hold the same rows (ids aside), the same
// actionable set and the same TTL candidates.
func (d *diff) compare(step int) {
	ctx := d.t.Context()
	var rows [2]string
	for i := range 2 {
		all, err := d.s[i].List(ctx)
		if err != nil {
			d.t.Fatal(err)
		}
		act, err := d.s[i].ListActionable(ctx)
		if err != nil {
			d.t.Fatal(err)
		}
		cs, err := d.s[i].TTLCandidates(ctx)
		if err != nil {
			d.t.Fatal(err)
		}
		names := map[string]string{}
		var b strings.Builder
		slices.SortFunc(all, func(a, b workspace.Workspace) int { return strings.Compare(a.Name, b.Name) })
		for _, w := range all {
			names[w.ID] = w.Name
			w.ID = ""
			fmt.Fprintf(&b, "%s\n", norm(w))
		}
		ids, err := d.s[i].ListActionableIDs(ctx)
		if err != nil {
			d.t.Fatal(err)
		}
		var an, cn, in []string
		for _, w := range act {
			an = append(an, w.Name)
		}
		for _, id := range ids {
			in = append(in, names[id])
		}
		for _, c := range cs {
			cn = append(cn, fmt.Sprint(names[c.ID], c.Observed, c.Version, c.Since.UnixMilli()))
		}
		slices.Sort(an)
		slices.Sort(cn)
		slices.Sort(in)
		fmt.Fprintf(&b, "actionable %v\nactionable ids %v\nttl %v\n", an, in, cn)
		rows[i] = b.String()
	}
	if diff := cmp.Diff(rows[1], rows[0]); diff != "" {
		d.t.Fatalf("step %d: memstore differs from the database (-database +memstore):\n%s", step, diff)
	}
}

// norm prints a row with times as milliseconds (zones differ by driver).
func norm(w workspace.Workspace) string {
	ms := func(t *time.Time) string {
		if t == nil {
			return "nil"
		}
		return fmt.Sprint(t.UnixMilli())
	}
	info := "nil"
	if w.ErrorInfo != nil {
		e := *w.ErrorInfo
		info = fmt.Sprintf("%s/%s/%v/%d/%s/%d", e.Reason, e.Operation, e.IsTerminal, e.ErrorCount, e.LastError, e.OccurredAt.UnixNano())
	}
	return fmt.Sprintf("%s %s/%s obs@%s op=%s id=%s start=%s owner=%s lease=%s exec=%v key=%s errs=%d info=%s prev=%s retry=%s/%s c=%d u=%d",
		w.Name, w.ObservedStatus, w.DesiredState, ms(w.ObservedAt), w.Operation, w.OpID, ms(w.OpStartedAt), w.OpOwner,
		ms(w.OpLeaseUntil), w.OpExecuted, w.ArchiveKey, w.ErrorCount, info, w.PreviousStatus, ms(w.LastRetryAt), ms(w.NextRetryAt),
		w.CreatedAt.UnixMilli(), w.UpdatedAt.UnixMilli())
}
