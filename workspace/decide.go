package workspace

import "time"

// Policy is the numbers a reconcile step judges by: Config's, without the
// clock, the store or the providers. Zero values are the seed's defaults,
// as in Config (whose validated fields copy over one to one).
type Policy struct {
	// Owner is this replica's op_owner (Config.Owner): an operation it owns
	// is its own to run again; another's live lease is waited for.
	Owner string
	// Interval is the reconcile interval (RECONCILER_INTERVAL); 0 = 10 s.
	// A takeover waiting for an observation looks again within it.
	Interval time.Duration
	// MaxRetries is the retries after the first attempt
	// (RECONCILER_MAX_RETRIES); 0 = 3, < 0 = none.
	MaxRetries int
	// RetryBackoff is the first retry's delay (RECONCILER_RETRY_BACKOFF),
	// doubling per retry up to RetryBackoffMax; 0 = 30 s. No jitter: one
	// workspace's retries are its own, so Decide needs no randomness.
	RetryBackoff time.Duration
	// RetryBackoffMax caps the backoff; 0 = 32 × RetryBackoff.
	RetryBackoffMax time.Duration
	// CrashWindow: a command that ends within this long of its previous
	// end counts one more failed attempt (a crash loop); one that ran
	// longer starts the count again. 0 = 10 min.
	CrashWindow time.Duration
	// Timeouts per operation (RECONCILER_*_TIMEOUT); missing or 0 = 300 s
	// for STARTING and STOPPING, 1800 s for the others.
	Timeouts map[Operation]time.Duration
	// Lease is how long a claim survives its replica without renewal;
	// 0 = 15 s.
	Lease time.Duration
}

// exitPollMax bounds how long an executed start waits between asking the
// container whether its command ended (the reconciler's maxExitPoll).
const exitPollMax = 30 * time.Second

// observationPoll bounds the wait for an observation a takeover needs.
const observationPoll = 250 * time.Millisecond

func (p Policy) withDefaults() Policy {
	orDefault := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	orDefault(&p.Interval, 10*time.Second)
	orDefault(&p.RetryBackoff, 30*time.Second)
	orDefault(&p.RetryBackoffMax, 32*p.RetryBackoff)
	orDefault(&p.CrashWindow, 10*time.Minute)
	orDefault(&p.Lease, 15*time.Second)
	if p.MaxRetries == 0 {
		p.MaxRetries = 3
	}
	return p
}

// timeout is op's timeout.
func (p Policy) timeout(op Operation) time.Duration {
	if d := p.Timeouts[op]; d > 0 {
		return d
	}
	if op == OpStarting || op == OpStopping {
		return 300 * time.Second
	}
	return 1800 * time.Second
}

// retryDelay is the wait before retry n (0 = the first): RetryBackoff
// doubled n times, capped at RetryBackoffMax (internal/backoff's Delay
// without jitter, as Config.retryPolicy asks).
func (p Policy) retryDelay(n int) time.Duration {
	d, most := p.RetryBackoff, max(p.RetryBackoffMax, p.RetryBackoff)
	for ; n > 0 && d < most; n-- {
		if d > most/2 {
			return most
		}
		d *= 2
	}
	return min(d, most)
}

// Observation is what a step learned from outside the row: facts the row
// alone does not give (the storage's archive key, what the container can
// report) and the outcomes of the step's own questions and calls.
type Observation struct {
	// ArchiveCommitted: the row's archive_key is the one its operation
	// writes (row.ArchiveKey == provider.ArchiveKey(row.ID, row.OpID)):
	// an ARCHIVING's archive is committed; only the volume's removal is left.
	ArchiveCommitted bool
	// ExitReports: the container can tell when a command ended
	// (provider.ExitReporter). Without it no end is ever asked for.
	ExitReports bool
	// ExitAsked: the step asked the container (ActAskExit) and Exit is its
	// answer: the end reported since Decision.ExitSince (Exited(id,
	// since)), nil for none or a failed question.
	ExitAsked bool
	Exit      *ExitReport
	// Call is the outcome of the provider call the step just made for the
	// row's operation (after ActClaim, ActCompleteAndClaim, ActAcquire or
	// ActTakeover, on the row as that write left it); nil before the call.
	Call *CallResult
}

// ExitReport is the end of a workspace's command, as the container reports
// it (provider.Exit).
type ExitReport struct {
	Status  string    // "exit 3", "signal killed"
	Code    int       // the exit status; -1 when a signal ended it (not judged)
	At      time.Time // when it ended: each end counts once
	Output  string    // its last lines
	Message string    // the error text of the end: provider.ExitError's Error()
}

// CallResult is how a provider call ended. The zero value is a success.
type CallResult struct {
	// Failed: the call returned an error; the fields below describe it.
	Failed bool
	Err    string // its text: error_info.last_error
	// Reason is error_info.reason (failureReason: Unreachable, a provider's
	// own; "" = ActionFailed, or Exited with an Exit); for a permanent
	// error, the PermanentError's reason.
	Reason string
	// Permanent: retrying cannot fix it (provider.PermanentError).
	Permanent bool
	// DeadlineExceeded: the error is the call's context deadline (the
	// operation's timeout, if it has passed by the outcome's time).
	DeadlineExceeded bool
	// Exit: the command ended (provider.ExitError).
	Exit *ExitReport
}

// Action is what a reconcile step does, as Decide judges it. Each says
// what the caller writes, calls and announces; Decision's fields carry
// the rest (the wake-up and the monitor hint are in every Decision that
// needs them).
type Action int

const (
	// ActSettled: nothing to do (converged, ERROR, or no plan); an urgent
	// workspace is no longer urgent.
	ActSettled Action = iota
	// ActWait: nothing to write now. Wake and HintMonitor say what to
	// arrange (a terminal error waits for the monitor's ERROR, no wake-up).
	ActWait
	// ActAskExit: ask the container for the command's end since ExitSince
	// (provider.ExitReporter.Exited), set Observation.ExitAsked and Exit,
	// and decide again. Op and ObservationEnds say what would follow.
	ActAskExit
	// ActAbandon: a change of desired state takes over (Superseded):
	// Store.Abandon, hint the workspace, step again on the row as
	// abandoned (operation NONE, error count and info cleared).
	ActAbandon
	// ActComplete: observed at the target: Store.Complete, hint the
	// workspace, step again on the row as completed.
	ActComplete
	// ActCompleteRestart: a restart after a crash reached RUNNING:
	// Store.CompleteRestart (the count and the last end stay, for the
	// crash window), hint, step again.
	ActCompleteRestart
	// ActCompleteAndClaim: complete, and claim Op planned from the row as
	// completed, in one write (Store.CompleteAndClaim, LeaseUntil); hint the
	// workspace; then call the provider for Op.
	ActCompleteAndClaim
	// ActClaim: claim Op (Store.Claim with a fresh op_id, LeaseUntil); then
	// call the provider for Op.
	ActClaim
	// ActAcquire: run this replica's operation again (a retry whose time
	// has come, or a call a crash cut short): Store.Acquire, then call.
	ActAcquire
	// ActTakeover: ActAcquire of another replica's operation, its lease
	// lapsed (and observed since): logged as a takeover.
	ActTakeover
	// ActTimeOut: past its timeout: Store.Terminal(Info) (terminal Timeout;
	// the operation stays), hint the monitor.
	ActTimeOut
	// ActCrashed: an executed start whose command ended before it was
	// observed running: Store.Crashed(Info, RetryAt), hint the workspace,
	// then as ActFail.
	ActCrashed
	// ActExecuted: the call returned: Store.Executed, hint the monitor,
	// wake at the operation's deadline (Wake).
	ActExecuted
	// ActDeleteRow: DELETING's call returned: Store.DeleteRow, hint the
	// workspace; the workspace is gone.
	ActDeleteRow
	// ActFail: the call failed: Store.Failed(Info, RetryAt); terminal
	// (RetryAt nil): hint the monitor, which flips it to ERROR; else wake
	// at RetryAt.
	ActFail
)

var actionNames = [...]string{"settled", "wait", "ask-exit", "abandon", "complete", "complete-restart",
	"complete-and-claim", "claim", "acquire", "takeover", "timeout", "crashed", "executed", "delete-row", "fail"}

func (a Action) String() string {
	if a >= 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(?)"
}

// Decision is Decide's answer: an Action and what it needs.
type Decision struct {
	Action Action
	// Op is the operation ActClaim and ActCompleteAndClaim claim (and that
	// an ActAskExit before one would).
	Op Operation
	// Info is the error_info ActTimeOut, ActCrashed and ActFail write; its
	// ErrorCount is the error_count.
	Info *ErrorInfo
	// RetryAt is next_retry_at for ActCrashed and ActFail: nil when Info is
	// terminal.
	RetryAt *time.Time
	// Wake is when to step again unless something pokes sooner
	// (pokeAt(id, Wake.Sub(now))); zero = no wake-up.
	Wake time.Time
	// HintMonitor: publish ChanMonitor for the workspace (observe it now).
	HintMonitor bool
	// LeaseUntil is the lease a claim or an acquire writes; Deadline is
	// its call's context deadline: the operation's timeout from its claim
	// (for a claim, now).
	LeaseUntil, Deadline time.Time
	// Exit, on a decision that ends in a call for STARTING: the command
	// ended and that end is not counted yet. Make no Start call: the
	// call's outcome is this end (CallResult{Failed: true, Err:
	// Exit.Message, Exit: Exit}), a failed attempt, then a restart.
	Exit *ExitReport
	// ExitSince is ActAskExit's question: the end since when.
	ExitSince time.Time
	// ObservationEnds, on ActComplete and ActCompleteAndClaim: the
	// observation that shows the target may end the operation in its own
	// write (the monitor's SetObservedComplete): the call was executed and
	// no error info asks for the reconciler's judgement (a crash loop's
	// restart, a failed observation, a terminal error); never DELETING,
	// which ends by removing the row. It is the completion the
	// reconciler's next step would write, one write and one step sooner:
	// the monitor asks Decide about the row as it observed it.
	ObservationEnds bool
}

// Decide is one reconcile step's judgment, a pure function of the row it
// read, what it learned from outside the row (obs), the time and the
// policy. The caller applies the Decision (its Action says which store
// write, provider call and hints) and, after a claim or an acquire, makes
// the provider call (bounded by Deadline) and decides again with its
// outcome in obs.Call. The first row that matches decides:
//
//	row, obs                                           decision
//	obs.Call: succeeded, DELETING                      delete-row
//	obs.Call: succeeded                                executed, wake at the deadline
//	obs.Call: failed, permanent                        fail, terminal (the error's reason)
//	obs.Call: failed, deadline, timeout passed         fail, terminal Timeout
//	obs.Call: failed, error_count+1 > MaxRetries       fail, terminal RetryExceeded
//	obs.Call: failed                                   fail, retry after RetryBackoff·2ⁿ (capped)
//	observed ERROR, desired not DELETED                settled (the seed's skip)
//	no operation, RUNNING = desired, restart pending   claim STOPPING (then STARTING: a restart)
//	no operation, observed = desired, or Plan NONE     settled
//	no operation                                       claim Plan(observed, desired, archive)
//	in flight, Superseded (phase from owner, lease,    abandon
//	  executed, error count, terminal info)
//	terminal error_info, not DELETING                  wait, hint the monitor (it flips to ERROR)
//	at its target, not DELETING (ARCHIVING: its own    complete-restart  (a crash loop's start)
//	  archive committed; a crash loop's start: only    complete-and-claim (the completed row plans one)
//	  2 s, CrashGrace, after its retry time)           complete
//	claimed longer ago than its timeout                timeout (terminal Timeout, the op stays)
//	executed STARTING, not RUNNING, an uncounted end   crashed (fail's rules; it runs again)
//	executed                                           wait until the deadline, or the next exit poll
//	                                                   (a STARTING: 1 s … 30 s, as long as it waited)
//	a retry time ahead                                 wait until it
//	owned here                                         acquire
//	another's, no lease                                takeover
//	another's live lease                               wait until it lapses
//	another's lapsed lease, not observed since         wait, hint the monitor, wake within 250 ms
//	another's lapsed lease, observed since             takeover
//
// Every decision that ends in a STARTING call (claim, complete-and-claim,
// acquire, takeover) first needs the container's word on an end of the
// command not counted yet (after error_info.exited_at): ask-exit since
// zero, then Exit; so does an executed STARTING not RUNNING (ask-exit since
// its claim). Without ExitReports none is asked for. An end counts after
// the last one: within CrashWindow of it, error_count+1; later, 1.
func Decide(row Workspace, obs Observation, now time.Time, policy Policy) Decision {
	p := policy.withDefaults()
	switch {
	case obs.Call != nil:
		return p.called(row, *obs.Call, now)
	case row.ObservedStatus == Error && row.DesiredState != Deleted:
		return Decision{Action: ActSettled}
	case row.Operation != OpNone:
		return p.inFlight(row, obs, now)
	}
	op := planFor(row)
	if op == OpNone {
		return Decision{Action: ActSettled}
	}
	return p.toCall(Decision{Action: ActClaim, Op: op}, op, row, obs, now)
}

// planFor is the operation a step claims on w: none while one is in
// flight, when w is converged or in ERROR (unless deleting), else the plan;
// a restart pending on a RUNNING workspace that should be RUNNING is a
// STOPPING (its claim clears the restart, and the STARTING the plan then
// asks for runs the command with the spec as it is now).
func planFor(w Workspace) Operation {
	switch {
	case w.Operation != OpNone, w.ObservedStatus == Error && w.DesiredState != Deleted:
		return OpNone
	case w.ObservedStatus == w.DesiredState && w.RestartPending && w.ObservedStatus == Running:
		return OpStopping
	case w.ObservedStatus == w.DesiredState:
		return OpNone
	}
	return Plan(w.ObservedStatus, w.DesiredState, w.ArchiveKey != "")
}

// inFlight judges row's operation in flight: given up, waiting for ERROR,
// complete, timed out, or (waitOrRun) waiting or run.
func (p Policy) inFlight(row Workspace, obs Observation, now time.Time) Decision {
	committed := row.Operation == OpArchiving && obs.ArchiveCommitted
	if Superseded(row.Operation, p.phase(row, now), row.ObservedStatus, row.DesiredState, row.ArchiveKey != "", committed) {
		return Decision{Action: ActAbandon}
	}
	if row.ErrorInfo != nil && row.ErrorInfo.IsTerminal && row.Operation != OpDeleting {
		return Decision{Action: ActWait, HintMonitor: true}
	}
	if row.Operation != OpDeleting && complete(row, obs, now) {
		return p.completion(row, obs, now)
	}
	if elapsed := now.Sub(startedAt(row)); elapsed > p.timeout(row.Operation) {
		return Decision{Action: ActTimeOut, HintMonitor: true, Info: &ErrorInfo{Reason: ReasonTimeout, Operation: row.Operation,
			IsTerminal: true, ErrorCount: row.ErrorCount, Elapsed: elapsed.Seconds(), OccurredAt: now.UTC()}}
	}
	return p.waitOrRun(row, obs, now)
}

// phase is where row's operation stands for Superseded. Another replica's
// live lease means its call may be running: calling, whatever the row's
// failures say, until the lease lapses.
func (p Policy) phase(row Workspace, now time.Time) OpPhase {
	switch {
	case row.ErrorInfo != nil && row.ErrorInfo.IsTerminal:
		return PhaseFailed
	case row.OpOwner != p.Owner && row.OpLeaseUntil != nil && now.Before(*row.OpLeaseUntil):
		return PhaseCalling
	case row.OpExecuted:
		return PhaseExecuted
	case row.ErrorCount > 0:
		return PhaseRetrying
	}
	return PhaseCalling
}

// complete reports whether row's operation is over: observed at its
// target, unless it is a restart after the command ended that has not
// stayed up for CrashGrace since its retry time.
func complete(row Workspace, obs Observation, now time.Time) bool {
	if row.Operation == OpStarting && row.ErrorInfo != nil && row.ErrorInfo.Reason == ReasonExited && row.NextRetryAt != nil &&
		now.Before(row.NextRetryAt.Add(CrashGrace)) {
		return false
	}
	if row.Operation == OpArchiving {
		return row.ObservedStatus == Pending && obs.ArchiveCommitted
	}
	return row.ObservedStatus == row.Operation.Target()
}

// completion ends row's operation, at its target: a crash loop's restart
// keeps its count; otherwise the row as completed may plan the next one.
func (p Policy) completion(row Workspace, obs Observation, now time.Time) Decision {
	ends := row.OpExecuted && row.ErrorInfo == nil
	if CrashLooping(&row) {
		return Decision{Action: ActCompleteRestart}
	}
	next := *Completed(row)
	if op := planFor(next); op != OpNone {
		return p.toCall(Decision{Action: ActCompleteAndClaim, Op: op, ObservationEnds: ends}, op, next, obs, now)
	}
	return Decision{Action: ActComplete, ObservationEnds: ends}
}

// waitOrRun: row's operation neither ended nor timed out waits (for the
// monitor, its retry time, another replica's lease or an observation) or
// is run again here.
func (p Policy) waitOrRun(row Workspace, obs Observation, now time.Time) Decision {
	if row.OpExecuted {
		return p.executedWait(row, obs, now)
	}
	switch {
	case row.NextRetryAt != nil && now.Before(*row.NextRetryAt):
		return Decision{Action: ActWait, Wake: *row.NextRetryAt}
	case row.OpOwner == p.Owner:
		return p.toCall(Decision{Action: ActAcquire}, row.Operation, row, obs, now)
	case row.OpLeaseUntil == nil:
	case now.Before(*row.OpLeaseUntil):
		return Decision{Action: ActWait, Wake: *row.OpLeaseUntil}
	case row.ObservedAt == nil || !row.ObservedAt.After(*row.OpLeaseUntil):
		// The dead owner's call may have taken effect before it could
		// record it: take over only after an observation made since its
		// lease lapsed (which completes the operation if it did).
		return Decision{Action: ActWait, HintMonitor: true, Wake: now.Add(min(p.Interval, observationPoll))}
	}
	return p.toCall(Decision{Action: ActTakeover}, row.Operation, row, obs, now)
}

// executedWait: an executed operation waits for the monitor (it is never
// called again while it waits: the seed's defect 2), except a start whose
// command ended since its claim, which is a failed attempt.
func (p Policy) executedWait(row Workspace, obs Observation, now time.Time) Decision {
	starting := row.Operation == OpStarting && obs.ExitReports
	if starting && row.ObservedStatus != Running {
		if !obs.ExitAsked {
			return Decision{Action: ActAskExit, ExitSince: startedAt(row)}
		}
		if uncounted(row, obs.Exit) {
			return p.failed(ActCrashed, row, exitResult(obs.Exit), now)
		}
	}
	wake := p.deadline(row)
	if starting {
		// A start normally completes at the monitor's next observation;
		// its command's end shows only to the container: check again a
		// second after the start, then after as long again as it waited.
		poll := now.Add(min(max(time.Second, now.Sub(startedAt(row))), exitPollMax))
		if poll.Before(wake) {
			wake = poll
		}
	}
	return Decision{Action: ActWait, Wake: wake}
}

// toCall completes d, which ends in the provider call for op on row (as
// the claim leaves it): the lease, and for a start, an uncounted end of
// the command to record instead of starting it.
func (p Policy) toCall(d Decision, op Operation, row Workspace, obs Observation, now time.Time) Decision {
	claimed := now
	if d.Action == ActAcquire || d.Action == ActTakeover {
		claimed = startedAt(row)
	}
	d.LeaseUntil, d.Deadline = now.Add(p.Lease), claimed.Add(p.timeout(op))
	if op != OpStarting || !obs.ExitReports {
		return d
	}
	if !obs.ExitAsked {
		d.Action, d.ExitSince, d.LeaseUntil, d.Deadline = ActAskExit, time.Time{}, time.Time{}, time.Time{}
		return d
	}
	if uncounted(row, obs.Exit) {
		d.Exit = obs.Exit
	}
	return d
}

// uncounted reports whether e is an end of row's command its error info
// has not counted yet.
func uncounted(row Workspace, e *ExitReport) bool {
	return e != nil && (row.ErrorInfo == nil || e.At.After(row.ErrorInfo.ExitedAt))
}

// exitResult is the failed call an end of the command makes.
func exitResult(e *ExitReport) CallResult {
	return CallResult{Failed: true, Err: e.Message, Reason: ReasonExited, Exit: e}
}

// called judges the outcome of the provider call for row's operation.
func (p Policy) called(row Workspace, res CallResult, now time.Time) Decision {
	switch {
	case res.Failed:
		return p.failed(ActFail, row, res, now)
	case row.Operation == OpDeleting:
		return Decision{Action: ActDeleteRow}
	}
	return Decision{Action: ActExecuted, HintMonitor: true, Wake: p.deadline(row)}
}

// failed is action a (ActFail, ActCrashed) for the failed attempt res:
// terminal (hint the monitor) or retried (wake at the retry time).
func (p Policy) failed(a Action, row Workspace, res CallResult, now time.Time) Decision {
	info, next := p.failure(row, res, now)
	d := Decision{Action: a, Info: info, RetryAt: next, HintMonitor: info.IsTerminal}
	if next != nil {
		d.Wake = *next
	}
	return d
}

// failure is the error info of the failed attempt res on row and, unless
// terminal, when to try again.
func (p Policy) failure(row Workspace, res CallResult, now time.Time) (*ErrorInfo, *time.Time) {
	count, prev := row.ErrorCount+1, row.ErrorInfo
	if res.Exit != nil && prev != nil && prev.Reason == ReasonExited && res.Exit.At.Sub(prev.ExitedAt) > p.CrashWindow {
		count = 1 // it ran longer than the crash window since its last end: a new count
	}
	info := &ErrorInfo{Reason: res.Reason, Operation: row.Operation, ErrorCount: count, LastError: res.Err, OccurredAt: now.UTC()}
	switch {
	case info.Reason != "" || res.Permanent:
	case res.Exit != nil:
		info.Reason = ReasonExited
	default:
		info.Reason = ReasonActionFailed
	}
	if e := res.Exit; e != nil {
		info.ExitStatus, info.Output, info.ExitedAt = e.Status, e.Output, e.At.UTC()
	}
	switch {
	case res.Permanent:
		info.IsTerminal = true
	case res.DeadlineExceeded && !now.Before(p.deadline(row)):
		info.Reason, info.IsTerminal = ReasonTimeout, true
		info.Elapsed = now.Sub(startedAt(row)).Seconds()
	case count > p.MaxRetries:
		info.Reason, info.IsTerminal = ReasonRetryExceeded, true
	default:
		next := upToMillis(now.Add(p.retryDelay(count - 1)))
		return info, &next
	}
	return info, nil
}

// deadline is when row's operation times out.
func (p Policy) deadline(row Workspace) time.Time {
	return startedAt(row).Add(p.timeout(row.Operation))
}

// startedAt is when row's operation was claimed (zero if unknown: it has
// timed out).
func startedAt(row Workspace) time.Time {
	if row.OpStartedAt != nil {
		return *row.OpStartedAt
	}
	return time.Time{}
}

// upToMillis is t's wall clock rounded up to a whole millisecond, the
// precision the store keeps times in: a retry time stored so is never
// before the policy's delay has passed.
func upToMillis(t time.Time) time.Time {
	t = t.Round(0)
	c := t.Truncate(time.Millisecond)
	if c.Before(t) {
		c = c.Add(time.Millisecond)
	}
	return c
}
