package taskq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Middleware wraps every handler of a worker: code that runs before and
// after each task (logging, tracing, metrics, recovering a context value).
type Middleware func(HandlerFunc) HandlerFunc

// Use adds handler middleware; the first added is the outermost. It applies
// to tasks that start after the call.
func (w *Worker) Use(mw ...Middleware) {
	w.hmu.Lock()
	defer w.hmu.Unlock()
	w.middleware = append(w.middleware, mw...)
}

// EnqueueFunc is Client.Enqueue's shape, what enqueue middleware wraps.
type EnqueueFunc func(ctx context.Context, t *Task, opts ...Option) (*TaskInfo, error)

// EnqueueMiddleware wraps every enqueue of a client: it may read and set
// the task's Headers and options before calling next, and see its outcome.
// In EnqueueBatch the chain runs for each task before the batch is written:
// next returns the task's TaskInfo without an error, and a failed write is
// EnqueueBatch's error.
type EnqueueMiddleware func(next EnqueueFunc) EnqueueFunc

// Use adds enqueue middleware; the first added is the outermost. Call it
// before the client is shared.
func (c *Client) Use(mw ...EnqueueMiddleware) { c.middleware = append(c.middleware, mw...) }

// chain wraps base in the client's middleware.
func (c *Client) chain(base EnqueueFunc) EnqueueFunc {
	for i := len(c.middleware) - 1; i >= 0; i-- {
		base = c.middleware[i](base)
	}
	return base
}

// Header sets one header of the task (see Task.Headers).
func Header(key, value string) Option {
	return func(o *options) {
		if o.headers == nil {
			o.headers = map[string]string{}
		}
		o.headers[key] = value
	}
}

// maxHeaders bounds what headers may add to a message.
const maxHeaders = 64 << 10

func checkHeaders(h map[string]string) error {
	n := 0
	for k, v := range h {
		if k == "" {
			return fmt.Errorf("%w: a header with an empty name", ErrInvalidTask)
		}
		n += len(k) + len(v)
	}
	if n > maxHeaders {
		return fmt.Errorf("%w: headers of %d bytes, at most %d", ErrInvalidTask, n, maxHeaders)
	}
	return nil
}

// Progress is what a running handler last reported with Task.Progress.
type Progress struct {
	Percent float64   `json:"percent"`
	Note    string    `json:"note,omitempty"`
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
}

// ErrNotRunning is returned by Task.Progress for a task that is not (or no
// longer) running: outside a handler, or after it was cancelled.
var ErrNotRunning = errors.New("taskq: task is not running")

// Progress records how far the handler is (0–100) with a short note; the
// inspector (`queue tasks get`) and the dashboard show it. Each call is one
// Redis write: report a few times a second at most. The last report stays
// with a completed task's retained record; a retry starts without one.
func (t *Task) Progress(ctx context.Context, percent float64, note string) error {
	if math.IsNaN(percent) || percent < 0 || percent > 100 {
		return fmt.Errorf("taskq: progress %v, want 0..100", percent)
	}
	if len(note) > 1024 {
		note = note[:1024]
	}
	r := t.runField()
	if r.progress == nil {
		return ErrNotRunning
	}
	b, _ := json.Marshal(Progress{Percent: percent, Note: note, At: time.Now().UTC().Truncate(time.Millisecond), Attempt: t.Attempt()})
	return r.progress(ctx, string(b))
}

// QueueOf is the queue an enqueue of t with opts puts it in (what enqueue
// middleware names its work by).
func QueueOf(t *Task, opts ...Option) string {
	o := options{queue: DefaultQueue}
	for _, f := range t.opts {
		f(&o)
	}
	for _, f := range opts {
		f(&o)
	}
	return o.queue
}
