package store

import "time"

// Work a user asked for goes first (package urgency has the whole
// story). Two things carry it through the store:
//
//   - the urgency.Mark on a context: its statements skip the batches
//     (batch.go), so they never queue behind bulk statements;
//   - the Gate given to Open (Options.Gate; the server's urgency.Gate,
//     which a user's request and the steps that follow it hold while they
//     are in flight): meanwhile the bulk batches of this store wait before
//     they start (yieldToUrgent), at most Gate.MaxYield each. An urgent
//     statement that skips the queue still needs the CPUs, this process's
//     and, on one machine, the database's; with 100,000 workspaces
//     converging both are saturated, and a user's request of half a dozen
//     statements waited behind the bulk's for the CPU at every one of
//     them. Bulk batches that wait grow meanwhile, so the bulk loses less
//     than the time it yields.

// Gate is what the batcher asks before a bulk batch starts: while urgent
// work is in flight it waits for Idle to close, at most MaxYield.
// *urgency.Gate is one (a nil one holds nothing).
type Gate interface {
	// Idle is closed once no urgent work is in flight.
	Idle() <-chan struct{}
	// MaxYield bounds one wait.
	MaxYield() time.Duration
}
