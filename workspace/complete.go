package workspace

import "time"

// When an operation is over: the rules Decide judges completion by, and
// the row a completion leaves (the reconciler's step and the monitor's
// observation both write one).

// Completed is w as Store.Complete leaves it.
func Completed(w Workspace) *Workspace {
	w.Operation, w.OpOwner, w.OpLeaseUntil, w.OpExecuted = OpNone, "", nil, false
	w.ErrorCount, w.ErrorInfo, w.NextRetryAt = 0, nil, nil
	return &w
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
