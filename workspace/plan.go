package workspace

// Plan is the seed's operation table with the PROVISIONING fix, a pure
// function of what is observed, what is desired and whether an archive
// exists. It returns OpNone when nothing is to be done (converged, ERROR,
// or an unknown state).
//
//	observed  desired          operation
//	PENDING   STANDBY|RUNNING  RESTORING (archive) | PROVISIONING (no archive)
//	STANDBY   RUNNING          STARTING
//	STANDBY   PENDING          ARCHIVING
//	RUNNING   STANDBY|PENDING  STOPPING   (RUNNING→PENDING: STOPPING, then ARCHIVING)
//	ERROR     *                (skip)
//	*         DELETED          DELETING  (also from ERROR: deleting needs no recovery)
func Plan(observed, desired Status, hasArchive bool) Operation {
	if desired == Deleted {
		return OpDeleting
	}
	if observed == Error || observed == desired {
		return OpNone
	}
	cur, tgt := observed.Level(), desired.Level()
	if cur < 0 || tgt < 0 {
		return OpNone
	}
	if cur < tgt {
		switch observed {
		case Pending:
			if hasArchive {
				return OpRestoring
			}
			return OpProvisioning
		case Standby:
			return OpStarting
		}
		return OpNone
	}
	switch observed {
	case Running:
		return OpStopping
	case Standby:
		return OpArchiving
	}
	return OpNone
}

// OpPhase is where an operation in flight stands, as Superseded sees it.
type OpPhase int

const (
	// PhaseCalling: claimed, and its provider call runs (or is about to,
	// or a replica died during it and another will take it over).
	PhaseCalling OpPhase = iota
	// PhaseExecuted: the call returned; the operation waits for the monitor
	// to observe its target.
	PhaseExecuted
	// PhaseRetrying: a call failed (or the command it started ended), and
	// the next attempt waits for its backoff; no call is running.
	PhaseRetrying
	// PhaseFailed: failed for good (terminal error info); the workspace is
	// in ERROR or about to be, until `ws recover`.
	PhaseFailed
)

var phaseNames = [...]string{"calling", "executed", "retrying", "failed"}

func (p OpPhase) String() string {
	if p >= 0 && int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "OpPhase(?)"
}

// Superseded reports whether a change of desired state takes over from op,
// in flight in phase on a workspace observed in observed: the operation is
// given up (ended without reaching its target) and the next one is planned
// for desired. A pure rule of the failure policy:
//
//	phase     superseded when
//	calling   never: it finishes, then the next step plans again (the seed's rule)
//	executed  never: likewise, once observed at its target (or timed out)
//	retrying  the plan from what is observed no longer asks for op (desired
//	          STANDBY while STARTING retries; anything but STANDBY/RUNNING
//	          while PROVISIONING retries; DELETED for every operation), unless
//	          op has reached its target, or is an ARCHIVING whose archive is
//	          committed (only the volume's removal is left: it may be half
//	          done, so only DELETED, which discards the files anyway, takes over)
//	failed    desired DELETED only: deleting needs no recovery
//
// Retrying an operation that the user's change has made pointless only
// delays that change: a delete waited behind a crash loop's STARTING
// retries (minutes, then ERROR) and needed `ws recover` to go through.
// DELETING is never superseded, nor anything in ERROR but by DELETED.
func Superseded(op Operation, phase OpPhase, observed, desired Status, hasArchive, committed bool) bool {
	switch {
	case op == OpNone, op == OpDeleting:
		return false
	case phase == PhaseFailed, observed == Error:
		return desired == Deleted && (phase == PhaseFailed || phase == PhaseRetrying)
	case phase != PhaseRetrying:
		return false
	case op == OpArchiving && committed:
		return desired == Deleted
	case observed == op.Target():
		return false // reached: it completes
	}
	return Plan(observed, desired, hasArchive) != op
}
