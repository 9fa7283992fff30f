package workspace

import (
	"errors"

	"github.com/gantryhq/gantry/workspace/provider"
)

// FailureReason is the error_info.reason of a failed, retryable provider call.
func FailureReason(err error) string {
	var ee *provider.ExitError
	var re *provider.ReasonError
	switch {
	case errors.As(err, &re):
		return re.Reason
	case errors.Is(err, provider.ErrUnreachable):
		return ReasonUnreachable
	case errors.As(err, &ee):
		return ReasonExited
	}
	return ReasonActionFailed
}
