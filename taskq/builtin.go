package taskq

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// RegisterBuiltins registers the operations/demo task types on w:
//
//	noop                 succeeds at once
//	sleep  {"ms": N}     sleeps N ms (returns early when cancelled)
//	fail   {"times": N}  fails its first N attempts, then succeeds
func RegisterBuiltins(w *Worker) {
	w.Handle("noop", func(context.Context, *Task) error { return nil })
	w.Handle("sleep", func(ctx context.Context, t *Task) error {
		var p struct {
			MS *int64 `json:"ms"`
		}
		if err := decodePayload(t, &p); err != nil {
			return err
		}
		if p.MS == nil || *p.MS < 0 {
			return fmt.Errorf("sleep: payload needs \"ms\" >= 0: %w", SkipRetry)
		}
		tm := time.NewTimer(time.Duration(*p.MS) * time.Millisecond)
		defer tm.Stop()
		select {
		case <-tm.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	w.Handle("fail", func(ctx context.Context, t *Task) error {
		var p struct {
			Times int `json:"times"`
		}
		if err := decodePayload(t, &p); err != nil {
			return err
		}
		if t.Retried() < p.Times {
			return fmt.Errorf("fail: attempt %d of %d planned failures", t.Retried()+1, p.Times)
		}
		return nil
	})
}

// decodePayload parses a JSON payload strictly; a bad payload is not worth
// retrying.
func decodePayload(t *Task, v any) error {
	if len(t.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(t.Payload, v); err != nil {
		return fmt.Errorf("%s: payload is not the expected JSON: %v: %w", t.Type, err, SkipRetry)
	}
	return nil
}
