package workspace

import (
	"time"

	"github.com/gantryhq/gantry/workspace/provider"
)

// When an operation is over: the pure rules the reconciler's step and the
// monitor's observation share.

// Completed is w as Store.Complete leaves it.
func Completed(w Workspace) *Workspace {
	w.Operation, w.OpOwner, w.OpLeaseUntil, w.OpExecuted = OpNone, "", nil, false
	w.ErrorCount, w.ErrorInfo, w.NextRetryAt = 0, nil, nil
	return &w
}

// AtTarget reports whether status st is w's operation's target (an
// archive: PENDING with the archive its operation wrote).
func AtTarget(w *Workspace, st Status) bool {
	if w.Operation == OpArchiving {
		return st == Pending && w.ArchiveKey == provider.ArchiveKey(w.ID, w.OpID)
	}
	return st == w.Operation.Target()
}

// ObservationEnds reports whether observing st ends w's operation in the
// observation's own write (HealthMonitor, Store.SetObservedComplete):
// the provider call was executed, st is its target, and nothing asks for
// the reconciler's judgement: no error info (a crash loop's restart, a
// failed observation, a terminal error) and not DELETING, which ends by
// removing the row. It is the completion the reconciler's next step would
// write, one write and one step sooner.
func ObservationEnds(w *Workspace, st Status) bool {
	return w.OpExecuted && w.ErrorInfo == nil && w.Operation != OpNone && w.Operation != OpDeleting && AtTarget(w, st)
}

// CrashLooping reports whether w is a start after its command ended (a
// restart in a crash loop): its completion keeps the error count and the
// last exit, which the next end within CrashWindow counts on from.
func CrashLooping(w *Workspace) bool {
	return w.Operation == OpStarting && w.ErrorInfo != nil && w.ErrorInfo.Reason == ReasonExited && !w.ErrorInfo.IsTerminal
}

// CrashGrace is how long a command restarted after it ended must stay up
// before its start counts as done; ending sooner is another failed attempt.
const CrashGrace = 2 * time.Second
