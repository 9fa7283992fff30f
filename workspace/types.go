package workspace

import (
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/wstype"
)

// The vocabulary lives in wstype (so the store and the page share it
// without importing the reconciler); these aliases keep workspace.X
// working for callers.
type (
	Status       = wstype.Status
	Operation    = wstype.Operation
	ErrorInfo    = wstype.ErrorInfo
	Workspace    = wstype.Workspace
	NewWorkspace = wstype.NewWorkspace
	Spec         = wstype.Spec
	SpecUpdate   = wstype.SpecUpdate
)

const (
	Pending = wstype.Pending
	Standby = wstype.Standby
	Running = wstype.Running
	Error   = wstype.Error
	Deleted = wstype.Deleted

	// AdminOwner owns the workspaces made before owners existed.
	AdminOwner = wstype.AdminOwner

	OpNone         = wstype.OpNone
	OpProvisioning = wstype.OpProvisioning
	OpRestoring    = wstype.OpRestoring
	OpStarting     = wstype.OpStarting
	OpStopping     = wstype.OpStopping
	OpArchiving    = wstype.OpArchiving
	OpDeleting     = wstype.OpDeleting

	ReasonActionFailed  = wstype.ReasonActionFailed
	ReasonUnreachable   = wstype.ReasonUnreachable
	ReasonRetryExceeded = wstype.ReasonRetryExceeded
	ReasonTimeout       = wstype.ReasonTimeout
	ReasonObserveFailed = wstype.ReasonObserveFailed
	ReasonExited        = wstype.ReasonExited
)

// Sentinel errors (wstype's).
var (
	ErrNotFound  = wstype.ErrNotFound
	ErrNameTaken = wstype.ErrNameTaken
	ErrBadInput  = wstype.ErrBadInput
	ErrConflict  = wstype.ErrConflict
)

// ParseDesired parses a desired state as the API accepts it.
func ParseDesired(s string) (Status, error) { return wstype.ParseDesired(s) }

// Hints is the hint bus (package hints); the channel names are its.
type Hints = hints.Bus

const (
	ChanMonitor         = hints.ChanMonitor
	ChanWorkspace       = hints.ChanWorkspace
	ChanMonitorUrgent   = hints.ChanMonitorUrgent
	ChanWorkspaceUrgent = hints.ChanWorkspaceUrgent
)
