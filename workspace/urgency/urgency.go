// Package urgency carries "work a user asked for goes first" through the
// workspace components: the mark on a context (Mark, Is), the hint bus
// that publishes marked hints on the urgent channels first (Hints), the
// slot pools with a reserved urgent share (Lanes), and the count of a
// user's work in flight that bulk work waits for, a bounded time (Gate).
// It imports nothing of gantry but the hint channels' names.
//
// Tour:
//
//	urgency.go  Mark, Is, Hints, Lanes
//	gate.go     Gate (NewGate): BeginUrgent, InFlight, Idle, AwaitNone;
//	            DefaultMaxYield
//
// A TTL pass archiving a night's idle workspaces, or a replica's resync
// after a restart, can leave 100,000 workspaces to converge at once; a user
// who runs `ws up` meanwhile must not wait behind them. Urgency travels
// with the work, as a context mark (Mark), from the API request to
// everything that follows from it:
//
//   - the API marks every request's context, so its writes and reads go
//     ahead of bulk statements in the store's batches (the store's batches), and
//     its hints go out on the urgent channels (Hints);
//   - the reconciler serves ChanWorkspaceUrgent apart from ChanWorkspace; a
//     workspace so hinted stays urgent in its process until a step finds it
//     settled (reconcile: wsProc), its steps run with a marked context and take a
//     reserved share of the provider-call slots (reconcile: stepQueue);
//   - the monitor serves ChanMonitorUrgent apart from ChanMonitor, with its
//     own reserved share, and its observation hints back urgently;
//   - while a user's change is in flight (the API request, then the
//     reconcile step its hint causes, until it has claimed) the store's bulk
//     batches and the bulk steps about to start wait for it, a bounded time
//     (Gate, which the server gives to the store, the API and the
//     reconciler; reconcile: holdUrgent, runStep): the bulk saturates both CPUs,
//     and a change that skipped every queue still waited for the CPU at
//     each of its half-dozen statements.
//
// Bulk work never waits for urgent work beyond the share reserved for it
// and the bounded yields of its batches and of its steps about to start.
package urgency

import (
	"context"

	"github.com/gantryhq/gantry/workspace/hints"
)

type markKey struct{}

// Mark marks ctx as work a user asked for directly (an API call, the
// reconcile steps and observations that follow it): its statements go
// ahead of bulk work in the store's batches, its hints go on the urgent
// channels, and it takes the reserved share of Lanes.
func Mark(ctx context.Context) context.Context { return context.WithValue(ctx, markKey{}, true) }

// Is reports whether ctx was marked by Mark.
func Is(ctx context.Context) bool { u, _ := ctx.Value(markKey{}).(bool); return u }

// Hints publishes each hint made under a marked context on its channel's
// urgent twin first, so that the next component serves it first too, and
// then on the channel itself: the seed's channels (`workspace:{id}`,
// `monitor:trigger`) carry every change, a user's too, for whoever listens
// there (an SSE bridge). gantry's own subscribers take both: the plain
// copy comes behind any bulk hints and finds the work done (a re-read, an
// observation that changes nothing); if it comes first, the bulk step it
// queued is promoted when the urgent one arrives (reconcile: wsProc,
// stepQueue.promote).
type Hints struct{ hints.Bus }

// Publish publishes id on channel, and first on its urgent twin if ctx is
// marked.
func (h Hints) Publish(ctx context.Context, channel, id string) error {
	if twin := hints.UrgentTwin(channel); twin != channel && Is(ctx) {
		if err := h.Bus.Publish(ctx, twin, id); err != nil {
			return err
		}
	}
	return h.Bus.Publish(ctx, channel, id)
}

// Lanes bound concurrent work (provider calls, observations) to n slots, of
// which an eighth is reserved for urgent work: bulk work holds at most the
// rest, so urgent work finds a slot at once while bulk work queues.
type Lanes struct{ bulk, urgent chan struct{} }

// NewLanes makes Lanes of n slots.
func NewLanes(n int) Lanes {
	u := Share(n)
	if u == 0 {
		return Lanes{bulk: make(chan struct{}, max(n, 1))} // nothing to reserve: urgent work shares the one slot
	}
	return Lanes{bulk: make(chan struct{}, n-u), urgent: make(chan struct{}, u)}
}

// Share is how many of n slots are reserved for urgent work: an
// eighth, at least one, none when there is only one slot.
func Share(n int) int {
	if n < 2 {
		return 0
	}
	return max(1, n/8)
}

// Acquire takes a slot: bulk work from the bulk share, urgent work from
// whichever share frees one first. It returns the slot's release, or nil
// if ctx ended first.
func (l Lanes) Acquire(ctx context.Context, urgent bool) (release func()) {
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
