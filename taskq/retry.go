package taskq

import (
	"errors"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/backoff"
)

// A failed attempt is retried after a delay: the task type's retry policy
// (Handle's WithRetry) or else the worker's (WorkerConfig.Retry), scaled
// by the adaptive controller under a failure storm. A handler can ask for
// a delay of its own instead (RetryAfter), or put the task off without it
// counting as an attempt at all (Snooze).

// HandleOption configures how a worker handles one task type (Handle).
type HandleOption func(*handling)

// handling is what Handle registered for a task type.
type handling struct {
	h     HandlerFunc
	retry *backoff.Policy // nil: the worker's
}

// WithRetry gives the task type its own retry policy: the delay before
// retry n is p.Delay(n) (the worker's adaptive scaling applies as to the
// default policy). The retry budget stays the task's MaxRetries.
func WithRetry(p backoff.Policy) HandleOption {
	return func(h *handling) { h.retry = &p }
}

// RetryAfterError is the error of RetryAfter.
type RetryAfterError struct {
	After time.Duration
	Err   error // why, if given (RetryAfter's cause)
}

func (e *RetryAfterError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("retry after %v: %v", e.After, e.Err)
	}
	return fmt.Sprintf("retry after %v", e.After)
}

func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter, returned (or wrapped) by a handler, fails the attempt and
// schedules the next one d from now, whatever the retry policy says (a
// rate-limited API's Retry-After, say). It counts as an attempt: out of
// retries, the task goes to the dead letters. cause, if not nil, is the
// error recorded as the task's last.
func RetryAfter(d time.Duration, cause error) error {
	return &RetryAfterError{After: max(d, 0), Err: cause}
}

// SnoozeError is the error of Snooze.
type SnoozeError struct{ For time.Duration }

func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %v", e.For) }

// Snooze, returned (or wrapped) by a handler, puts the task off: it runs
// again d from now (scheduled meanwhile), and the attempt is neither a
// failure nor counted against its retries (its snoozes are: the
// inspector's "snoozes"). For a task that has to wait for something
// outside it, as often as it takes.
func Snooze(d time.Duration) error { return &SnoozeError{For: max(d, 0)} }

// retryDelay is the wait before retry n of a task of typ that failed
// with err.
func (w *Worker) retryDelay(typ string, n int, err error) time.Duration {
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return ra.After
	}
	p := w.cfg.Retry
	if h, ok := w.handling(typ); ok && h.retry != nil {
		p = *h.retry
	}
	return time.Duration(float64(p.Delay(n)) * w.adaptive.retryScale())
}
