package workspace

import (
	"context"

	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store"
)

// Work a user asked for goes first.
//
// A TTL pass archiving a night's idle workspaces, or a replica's resync
// after a restart, can leave 100,000 workspaces to converge at once; a user
// who runs `ws up` meanwhile must not wait behind them. Urgency travels
// with the work, as a context mark (store.Urgent), from the API request to
// everything that follows from it:
//
//   - the API marks every request's context, so its writes and reads go
//     ahead of bulk statements in the store's batches (store/batch.go), and
//     its hints go out on the urgent channels (urgentHints);
//   - the reconciler serves ChanWorkspaceUrgent apart from ChanWorkspace; a
//     workspace so hinted stays urgent in its process until a step finds it
//     settled (wsProc), its steps run with a marked context and take a
//     reserved share of the provider-call slots (lanes);
//   - the monitor serves ChanMonitorUrgent apart from ChanMonitor, with its
//     own reserved share, and its observation hints back urgently.
//
// Bulk work never waits for urgent work beyond the share reserved for it.

// urgentHints publishes each hint made under an urgent context on its
// channel's urgent twin, so that the next component serves it first too.
type urgentHints struct{ Hints }

func (h urgentHints) Publish(ctx context.Context, channel, id string) error {
	if store.IsUrgent(ctx) {
		channel = hints.UrgentTwin(channel)
	}
	return h.Hints.Publish(ctx, channel, id)
}

// lanes bound concurrent work (provider calls, observations) to n slots, of
// which an eighth is reserved for urgent work: bulk work holds at most the
// rest, so urgent work finds a slot at once while bulk work queues.
type lanes struct{ bulk, urgent chan struct{} }

func newLanes(n int) lanes {
	if n < 2 {
		return lanes{bulk: make(chan struct{}, max(n, 1))} // nothing to reserve: urgent work shares the one slot
	}
	u := max(1, n/8)
	return lanes{bulk: make(chan struct{}, n-u), urgent: make(chan struct{}, u)}
}

// acquire takes a slot: bulk work from the bulk share, urgent work from
// whichever share frees one first. It returns the slot's release, or nil
// if ctx ended first.
func (l lanes) acquire(ctx context.Context, urgent bool) (release func()) {
	var reserved chan struct{} // nil: never ready
	if urgent {
		reserved = l.urgent
	}
	select {
	case l.bulk <- struct{}{}:
		return func() { <-l.bulk }
	case reserved <- struct{}{}:
		return func() { <-reserved }
	case <-ctx.Done():
		return nil
	}
}
