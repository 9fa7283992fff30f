package workspace

import (
	"errors"

	"github.com/gantryhq/gantry/workspace/provider"
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
)

// failureReason is the error_info.reason of a failed, retryable provider call.
func failureReason(err error) string {
	if errors.Is(err, provider.ErrUnreachable) {
		return ReasonUnreachable
	}
	return ReasonActionFailed
}
