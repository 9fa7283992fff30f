package dsort

import (
	"errors"
	"fmt"
)

// Sentinel errors. The master's and worker's logic return these (wrapped
// with details by kindError or fmt.Errorf's %w); only the RPC handlers turn
// them into gRPC status codes (statusOf in transport.go), and only the
// clients' retry decisions read codes back (retryable, refused).
var (
	// ErrConfig: a MasterConfig or WorkerConfig failed validation.
	ErrConfig = errors.New("dsort: invalid config")
	// ErrAborted: the job was aborted (a worker failed or did not come back,
	// or the master was interrupted).
	ErrAborted = errors.New("dsort: job aborted")
	// ErrMasterLost: a worker could not reach its master for too long.
	ErrMasterLost = errors.New("dsort: lost contact with the master")

	// ErrBadRequest: a call's arguments are malformed or inconsistent.
	ErrBadRequest = errors.New("dsort: bad request")
	// ErrUnknownWorker: a call names a worker index the job does not have.
	ErrUnknownWorker = errors.New("dsort: unknown worker")
	// ErrStaleEpoch: a call comes from (or is meant for) a superseded
	// process of a worker.
	ErrStaleEpoch = errors.New("dsort: superseded epoch")
	// ErrWrongState: the callee is not in the state the call needs (seed
	// 000 §6.1).
	ErrWrongState = errors.New("dsort: call not allowed in this state")
	// ErrJobEnded: the job has already succeeded or aborted.
	ErrJobEnded = errors.New("dsort: the job has ended")
	// ErrJobSucceeded: a worker of a job that has already succeeded
	// registers again; its partitions are final and it must leave them.
	ErrJobSucceeded = errors.New("dsort: the job succeeded, your partitions are final")
	// ErrJobFull: the job already has its N workers and the caller is not
	// one of them.
	ErrJobFull = errors.New("dsort: the job has all its workers")
	// ErrNotReady: the callee cannot serve this yet (a worker still sorting);
	// retrying later helps.
	ErrNotReady = errors.New("dsort: not ready")
	// ErrNotOwner: a worker asked for a partition that is not its own.
	ErrNotOwner = errors.New("dsort: partition not owned by the caller")
)

// AbortError says why a job was aborted. errors.Is(err, ErrAborted) holds.
type AbortError struct {
	Reason string
}

func (e *AbortError) Error() string { return "dsort: job aborted: " + e.Reason }

// Is makes errors.Is(err, ErrAborted) true.
func (e *AbortError) Is(target error) bool { return target == ErrAborted }

// kindError is an error of one of the sentinel kinds above with its own
// message: errors.Is(err, kind) holds, and the message reads naturally
// instead of repeating the sentinel's text.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

// errorf returns a kindError of kind with a formatted message.
func errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}
