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
