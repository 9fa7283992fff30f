package taskq

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// Handler middleware runs around every task in the order added (the first
// outermost); enqueue middleware sees and sets headers, for Enqueue and for
// EnqueueBatch; the headers reach the handler and the inspector.
func TestMiddlewareAndHeaders(t *testing.T) {
	addr := testRedis(t)
	q := uniq(t, "mw")
	c := newClient(t, addr)
	ctx := t.Context()
	var enqSeen []string
	c.Use(func(next EnqueueFunc) EnqueueFunc {
		return func(ctx context.Context, tk *Task, opts ...Option) (*TaskInfo, error) {
			tk.Headers = map[string]string{"from-mw": "1", "caller": tk.Headers["caller"]}
			info, err := next(ctx, tk, opts...)
			if err == nil {
				enqSeen = append(enqSeen, QueueOf(tk, opts...)+"/"+info.ID)
			}
			return info, err
		}
	})
	one, err := c.Enqueue(ctx, &Task{Type: "h", Headers: map[string]string{"caller": "me"}}, Queue(q), Header("request-id", "r-1"), Retention(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.EnqueueBatch(ctx, []*Task{NewTask("h", nil, Queue(q)), NewTask("h", nil, Queue(q))})
	if err != nil {
		t.Fatal(err)
	}
	if len(enqSeen) != 3 || enqSeen[0] != q+"/"+one.ID || enqSeen[2] != q+"/"+batch[1].ID {
		t.Fatalf("enqueue middleware saw %v", enqSeen)
	}
	if _, err := c.Enqueue(ctx, NewTask("h", nil, Queue(q), Header("big", strings.Repeat("x", 70<<10)))); !errors.Is(err, ErrInvalidTask) {
		t.Errorf("70 KiB of headers: %v, want refused", err)
	}

	var mu sync.Mutex
	var order []string
	got := map[string]map[string]string{}
	trace := func(name string) Middleware {
		return func(next HandlerFunc) HandlerFunc {
			return func(ctx context.Context, tk *Task) error {
				mu.Lock()
				order = append(order, name+">")
				mu.Unlock()
				err := next(ctx, tk)
				mu.Lock()
				order = append(order, "<"+name)
				mu.Unlock()
				return err
			}
		}
	}
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 1})
	w.Use(trace("a"), trace("b"))
	w.Handle("h", func(_ context.Context, tk *Task) error {
		mu.Lock()
		got[tk.ID()] = tk.Headers
		order = append(order, "h")
		mu.Unlock()
		return nil
	})
	runWorker(t, w)
	waitFor(t, 10*time.Second, "three tasks handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 })
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order[:5], " ") != "a> b> h <b <a" {
		t.Errorf("middleware order %v, want a> b> h <b <a", order[:5])
	}
	if h := got[one.ID]; h["from-mw"] != "1" || h["caller"] != "me" || h["request-id"] != "r-1" {
		t.Errorf("headers in the handler: %v", h)
	}
	if h := got[batch[0].ID]; h["from-mw"] != "1" {
		t.Errorf("batch task headers: %v", h)
	}
	in := newInspector(t, addr)
	waitFor(t, 5*time.Second, "the retained record", func() bool {
		d, err := in.Get(ctx, q, one.ID)
		return err == nil && d.State == StateCompleted && d.Headers["request-id"] == "r-1"
	})
}

// A running handler's progress shows in the inspector while it runs and
// stays with the retained record; after the task ended a report is
// refused; a bad percentage is refused.
func TestProgress(t *testing.T) {
	addr := testRedis(t)
	q := uniq(t, "progress")
	c := newClient(t, addr)
	in := newInspector(t, addr)
	ctx := t.Context()
	info, err := c.Enqueue(ctx, NewTask("p", nil, Queue(q)), Retention(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	half, finish := make(chan struct{}), make(chan struct{})
	var after = make(chan *Task, 1)
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}})
	w.Handle("p", func(ctx context.Context, tk *Task) error {
		if err := tk.Progress(ctx, 101, ""); err == nil {
			t.Error("progress 101% accepted")
		}
		if err := tk.Progress(ctx, 50, "halfway"); err != nil {
			t.Error(err)
		}
		close(half)
		<-finish
		if err := tk.Progress(ctx, 100, "done"); err != nil {
			t.Error(err)
		}
		after <- tk
		return nil
	})
	runWorker(t, w)
	<-half
	d, err := in.Get(ctx, q, info.ID)
	if err != nil || d.State != StateActive || d.Progress == nil || d.Progress.Percent != 50 || d.Progress.Note != "halfway" || d.Progress.Attempt != 1 {
		t.Fatalf("while running: %+v %v (progress %+v)", d, err, d.Progress)
	}
	close(finish)
	tk := <-after
	waitFor(t, 5*time.Second, "completed with its last progress", func() bool {
		d, err := in.Get(ctx, q, info.ID)
		return err == nil && d.State == StateCompleted && d.Progress != nil && d.Progress.Percent == 100
	})
	if err := tk.Progress(ctx, 100, "late"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("progress after the end: %v, want ErrNotRunning", err)
	}
	if err := NewTask("x", nil).Progress(ctx, 1, ""); !errors.Is(err, ErrNotRunning) {
		t.Errorf("progress outside a handler: %v", err)
	}
}
