// The vocabulary shared by the store, the reconcilers, the API and the page:
// observed/desired states (Status), operations (Operation) and their targets,
// error info (ErrorInfo) and its reasons, the row (Workspace), what creating
// one needs (NewWorkspace) and the sentinel errors; spec.go holds Spec (what
// a workspace runs) and its validation.

package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Status is a workspace's observed status, written only by the
// HealthMonitor. It is also the vocabulary of desired_state (minus ERROR,
// plus DELETED).
//
//	PENDING  nothing runs and no volume exists; the data is in the archive
//	         (or, for a new workspace, nowhere yet: PROVISIONING makes it)
//	STANDBY  the volume exists, nothing runs
//	RUNNING  the container runs over the volume
//	ERROR    error_info.is_terminal: the reconciler skips it until recover
//	DELETED  desired only: stop, remove the volume and archives, drop the row
type Status string

const (
	Pending Status = "PENDING"
	Standby Status = "STANDBY"
	Running Status = "RUNNING"
	Error   Status = "ERROR"
	Deleted Status = "DELETED"
)

func (s Status) String() string { return string(s) }

// Level orders the lifecycle: PENDING(0) < STANDBY(10) < RUNNING(20).
func (s Status) Level() int {
	switch s {
	case Pending:
		return 0
	case Standby:
		return 10
	case Running:
		return 20
	}
	return -1
}

// ParseDesired parses a desired state as the API accepts it.
func ParseDesired(s string) (Status, error) {
	switch Status(s) {
	case Pending, Standby, Running:
		return Status(s), nil
	}
	return "", fmt.Errorf("%w: desired_state %q, want one of RUNNING, STANDBY, PENDING", ErrBadInput, s)
}

// Operation is the one action in flight for a workspace.
type Operation string

const (
	OpNone         Operation = "NONE"
	OpProvisioning Operation = "PROVISIONING" // PENDING without archive → STANDBY (empty volume)
	OpRestoring    Operation = "RESTORING"    // PENDING → STANDBY
	OpStarting     Operation = "STARTING"     // STANDBY → RUNNING
	OpStopping     Operation = "STOPPING"     // RUNNING → STANDBY
	OpArchiving    Operation = "ARCHIVING"    // STANDBY → PENDING (archive_key = key of op_id)
	OpDeleting     Operation = "DELETING"     // any → row removed
)

func (o Operation) String() string { return string(o) }

// Target is the observed status at which the operation is complete.
func (o Operation) Target() Status {
	switch o {
	case OpProvisioning, OpRestoring, OpStopping:
		return Standby
	case OpStarting:
		return Running
	case OpArchiving:
		return Pending
	case OpDeleting:
		return Deleted
	}
	return ""
}

// ErrorInfo is the seed's error_info JSON.
type ErrorInfo struct {
	Reason     string    `json:"reason"` // Timeout, RetryExceeded, ActionFailed, ChecksumMismatch, …
	Operation  Operation `json:"operation"`
	IsTerminal bool      `json:"is_terminal"`
	ErrorCount int       `json:"error_count"`
	LastError  string    `json:"last_error,omitempty"`
	Elapsed    float64   `json:"elapsed_seconds,omitempty"`
	OccurredAt time.Time `json:"occurred_at"`
	// ExitStatus ("exit 3", "signal killed") and Output (its last lines)
	// tell how the workspace's command ended (reason Exited).
	ExitStatus string    `json:"exit_status,omitempty"`
	Output     string    `json:"output,omitempty"`
	ExitedAt   time.Time `json:"exited_at,omitzero"` // when it ended: each end counts once
}

// JSON is e as the error_info column holds it: a JSON string, or nil.
func (e *ErrorInfo) JSON() any {
	if e == nil {
		return nil
	}
	b, _ := json.Marshal(e)
	return string(b)
}

// Workspace is one row.
type Workspace struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Owner is the owner of the token that created the workspace; only
	// that owner and admins see it. Names are unique per owner.
	Owner   string `json:"owner"`
	Image   string `json:"image,omitempty"`
	Command string `json:"command,omitempty"`
	Spec           // env and limits, applied at each start

	DesiredState   Status     `json:"desired_state"`
	ObservedStatus Status     `json:"observed_status"`
	ObservedAt     *time.Time `json:"observed_at,omitempty"`
	Operation      Operation  `json:"operation"`
	OpID           string     `json:"op_id,omitempty"`
	OpStartedAt    *time.Time `json:"op_started_at,omitempty"`
	// OpOwner is the replica executing the operation, OpLeaseUntil when
	// its claim lapses if it stops renewing, OpExecuted whether the
	// provider call returned (then only observation is awaited).
	OpOwner        string     `json:"op_owner,omitempty"`
	OpLeaseUntil   *time.Time `json:"op_lease_until,omitempty"`
	OpExecuted     bool       `json:"op_executed"`
	ArchiveKey     string     `json:"archive_key"`
	ErrorCount     int        `json:"error_count"`
	ErrorInfo      *ErrorInfo `json:"error_info"`
	PreviousStatus Status     `json:"previous_status,omitempty"`
	LastRetryAt    *time.Time `json:"last_retry_at,omitempty"`
	NextRetryAt    *time.Time `json:"next_retry_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	// RestartPending: the workspace is RUNNING but its command is to be
	// stopped and started again, to run with the spec it has now (a warm
	// pool member claimed with parameters that change only its env,
	// pool.go). The next claim of any operation clears it; until then
	// the workspace is not ready (Ready).
	RestartPending bool `json:"restart_pending,omitempty"`

	// Volume is the volume's path on this server (filled by the API).
	Volume string `json:"volume,omitempty"`
	// URL is the workspace app's own origin (filled by the API; "" if the
	// server has no apps domain or the name and owner make no DNS label).
	URL string `json:"url,omitempty"`
	// TemplateLatest, filled by the API, is the latest version of the
	// workspace's template when that is newer than the one it was made
	// from (0 otherwise).
	TemplateLatest int `json:"template_latest,omitempty"`
	// Pooled, in a create's answer only, says the workspace came RUNNING
	// from its template's warm pool (pool.go).
	Pooled bool `json:"pooled,omitempty"`
}

// Ready says whether w is RUNNING and settled there: no operation in
// flight and no restart pending. What `ws wait ID RUNNING` waits for, and
// what exec and the proxy need.
func (w *Workspace) Ready() bool {
	return w.ObservedStatus == Running && w.Operation == OpNone && !w.RestartPending
}

// Sentinel errors.
var (
	ErrNotFound  = errors.New("workspace: not found")
	ErrNameTaken = errors.New("workspace: name already taken")
	ErrBadInput  = errors.New("workspace: bad input")
	ErrConflict  = errors.New("workspace: conflict")
)

// error_info.reason values. The reconciler writes every reason but
// ObserveFailed, which only the HealthMonitor writes (and clears).
const (
	// ReasonActionFailed: a provider call failed; retried per the policy.
	ReasonActionFailed = "ActionFailed"
	// ReasonUnreachable: a provider call failed because its backend did
	// not answer (Docker engine down, S3 endpoint unreachable:
	// provider.ErrUnreachable); retried per the policy like ActionFailed
	// (the seed's error.md gives both 3 retries).
	ReasonUnreachable = "Unreachable"
	// ReasonRetryExceeded: the last retry failed too; terminal.
	ReasonRetryExceeded = "RetryExceeded"
	// ReasonTimeout: the operation outlived its timeout; terminal.
	ReasonTimeout = "Timeout"
	// ReasonObserveFailed: the HealthMonitor could not observe the
	// workspace (last_error says why). Never terminal: the status stays
	// what was last seen, an operation in flight still ends by its
	// timeout, and the next successful observation clears it.
	ReasonObserveFailed = "ObserveFailed"
	// ReasonExited: the workspace's command ended while it was being
	// started (exit status and last output in the error info); retried
	// with backoff like a failed call, ERROR after the retries.
	ReasonExited = "Exited"
)

// NewWorkspace is what creating a workspace needs.
type NewWorkspace struct {
	Name    string `json:"name"`
	Image   string `json:"image,omitempty"`
	Command string `json:"command,omitempty"`
	Spec
	// Template names the template to make this workspace from (its
	// latest version) and Params fill its parameters; the image, command
	// and spec then come from the template and may not be given.
	Template string            `json:"template,omitempty"`
	Params   map[string]string `json:"params,omitempty"`
	// Desired defaults to STANDBY: a new workspace gets an empty volume.
	Desired Status `json:"desired_state,omitempty"`
	// Owner is set by the API from the caller's token, never from the
	// request body; "" is the admin owner.
	Owner string `json:"-"`
	// ID and ArchiveKey, set by the API only (a fork, api/fork.go): the
	// new workspace's id ("" = a fresh one) and the archive its first
	// operation restores (RESTORING instead of PROVISIONING).
	ID         string `json:"-"`
	ArchiveKey string `json:"-"`
}

// MaxNameLen bounds a workspace name.
const MaxNameLen = 63

// AdminOwner owns the workspaces made before owners existed and those
// created without one.
const AdminOwner = "admin"

// Validate checks the name, the image, the command, the spec and the
// desired state, filling the default.
func (n *NewWorkspace) Validate() error {
	if err := ValidName(n.Name); err != nil {
		return err
	}
	if err := validRun(n.Image, n.Command); err != nil {
		return err
	}
	if err := validCommandLen(n.Command); err != nil {
		return err
	}
	if err := n.Spec.Validate(); err != nil {
		return err
	}
	if n.Owner == "" {
		n.Owner = AdminOwner
	}
	if n.Desired == "" {
		n.Desired = Standby
	}
	_, err := ParseDesired(string(n.Desired))
	return err
}

// ValidName checks a workspace name: 1–63 characters of A–Z, a–z, 0–9, '.',
// '_' and '-', starting with a letter or digit. Names appear in URLs, logs
// and container labels; ids, not names, name anything on disk.
func ValidName(name string) error {
	ok := name != "" && len(name) <= MaxNameLen
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		ok = alnum || i > 0 && (c == '.' || c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("%w: name %q: want 1–%d characters of A–Z, a–z, 0–9, '.', '_' or '-', starting with a letter or digit", ErrBadInput, name, MaxNameLen)
	}
	return nil
}
