// Package tasks holds gantry's built-in task types, the ones `gantry queue
// worker` serves: noop, sleep and fail (operations, demos, tests) and sort
// (`gantry sort local` as a task). It sits outside package taskq so the
// queue does not import what its tasks use (extsort).
package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/taskq"
)

// Register registers every built-in task type on w:
//
//	noop                                  succeeds at once
//	sleep  {"ms": N}                      sleeps N ms (returns early when cancelled), reporting progress each second;
//	                                      a batch (Group) as long as its longest member
//	fail   {"times": N}                   fails its first N attempts, then succeeds
//	echo   {"text": S}                    result: its workflow parents' results, in order, then S
//	sort   {"input": [dirs], "output": dir}  sorts gensort records (extsort), result {"records","partitions"}
func Register(w *taskq.Worker, log *slog.Logger) {
	w.Handle("sort", Sort(log))
	w.Handle("noop", func(context.Context, *taskq.Task) error { return nil })
	w.Handle("sleep", func(ctx context.Context, t *taskq.Task) error {
		total, err := sleepFor(t)
		if err != nil {
			return err
		}
		start := time.Now()
		tm := time.NewTimer(total)
		defer tm.Stop()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tm.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
				el := time.Since(start)
				// Best effort: a failed report does not fail the task.
				_ = t.Progress(ctx, min(100, 100*el.Seconds()/total.Seconds()), "slept "+el.Round(time.Second).String()+" of "+total.String())
			}
		}
	})
	w.Handle("echo", echo)
	w.Handle("fail", func(ctx context.Context, t *taskq.Task) error {
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

// sleepFor is how long sleep task t sleeps: its "ms", or a batch's
// members' longest.
func sleepFor(t *taskq.Task) (time.Duration, error) {
	tasks := t.Batch()
	if len(tasks) == 0 {
		tasks = []*taskq.Task{t}
	}
	var most int64
	for _, m := range tasks {
		var p struct {
			MS *int64 `json:"ms"`
		}
		if err := decodePayload(m, &p); err != nil {
			return 0, err
		}
		if p.MS == nil || *p.MS < 0 {
			return 0, fmt.Errorf("sleep: payload needs \"ms\" >= 0: %w", taskq.SkipRetry)
		}
		most = max(most, *p.MS)
	}
	return time.Duration(most) * time.Millisecond, nil
}

// decodePayload parses a JSON payload strictly; a bad payload is not worth
// retrying.
func decodePayload(t *taskq.Task, v any) error {
	if len(t.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(t.Payload, v); err != nil {
		return fmt.Errorf("%s: payload is not the expected JSON: %v: %w", t.Type, err, taskq.SkipRetry)
	}
	return nil
}

// Sort runs `sort local` on {"input": [dirs], "output": dir}: the result is
// {"records": N, "partitions": N}. A bad payload or input is not retried.
func Sort(log *slog.Logger) taskq.HandlerFunc {
	return func(ctx context.Context, t *taskq.Task) error {
		var p struct {
			Input  []string `json:"input"`
			Output string   `json:"output"`
		}
		if err := json.Unmarshal(t.Payload, &p); err != nil || len(p.Input) == 0 || p.Output == "" {
			return fmt.Errorf("sort: payload must be {\"input\": [dirs], \"output\": dir}: %w", taskq.SkipRetry)
		}
		in, _, err := extsort.ScanInputs(p.Input)
		if err != nil {
			return fmt.Errorf("sort: %v: %w", err, taskq.SkipRetry)
		}
		st, err := extsort.Sort(ctx, extsort.Config{Logger: log}, in, p.Output)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(map[string]any{"records": st.Records, "partitions": st.Partitions})
		t.SetResult(b)
		return nil
	}
}

// echo's result is its parents' results, in the order the workflow named
// them, followed by its text: what a chain or a chord hands along.
func echo(ctx context.Context, t *taskq.Task) error {
	var p struct {
		Text string `json:"text"`
	}
	if err := decodePayload(t, &p); err != nil {
		return err
	}
	var out []byte
	if len(t.Parents()) > 0 {
		res, err := t.ParentResults(ctx)
		if err != nil {
			return err
		}
		for _, id := range t.Parents() {
			r, ok := res[id]
			if !ok {
				return fmt.Errorf("echo: parent %s left no result: %w", id, taskq.SkipRetry)
			}
			out = append(out, r...)
		}
	}
	t.SetResult(append(out, p.Text...))
	return nil
}
