package workspace

import (
	"errors"

	"github.com/gantryhq/gantry/workspace/provider"
)

// failureReason is the error_info.reason of a failed, retryable provider call.
func failureReason(err error) string {
	if errors.Is(err, provider.ErrUnreachable) {
		return ReasonUnreachable
	}
	return ReasonActionFailed
}
