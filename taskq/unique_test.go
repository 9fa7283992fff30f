package taskq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Unique: a second enqueue with the key is refused, naming the holder,
// while the first task is pending, while it runs and after it completed,
// until the window ends; then a new task is accepted. Concurrent enqueues
// with one key add exactly one task.
func TestUniqueHoldsPendingRunningAndDone(t *testing.T) {
	t.Parallel() // waits on the unique window (main_test.go)
	addr := testRedis(t)
	c := newClient(t, addr)
	ctx := t.Context()
	q := uniq(t, "unique")
	const window = 3 * time.Second
	enq := func() (*TaskInfo, error) {
		return c.Enqueue(ctx, NewTask("block", nil), Queue(q), Unique("report:42", window))
	}
	first, err := enq()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	dup := func(when string) {
		t.Helper()
		_, err := enq()
		var de *DuplicateError
		if !errors.As(err, &de) || !errors.Is(err, ErrDuplicate) || de.ID != first.ID || de.Key != "report:42" {
			t.Fatalf("%s: %v; want a DuplicateError naming %s", when, err, first.ID)
		}
	}
	dup("pending")

	release := make(chan struct{})
	started := make(chan struct{}, 1)
	w, err := NewWorker(WorkerConfig{Redis: addr, Queues: []QueueSpec{{Name: q}}, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("block", func(ctx context.Context, _ *Task) error {
		started <- struct{}{}
		<-release
		return nil
	})
	runWorker(t, w)
	<-started
	dup("running")
	close(release)
	waitFor(t, 10*time.Second, "the task completed", func() bool { return queueStats(t, c, q).Completed == 1 })
	dup("completed")

	time.Sleep(time.Until(t0.Add(window + 100*time.Millisecond))) // real time: the window is Redis's clock
	second, err := enq()
	if err != nil || second.ID == first.ID {
		t.Fatalf("after the window: %v, %v; want a new task", second, err)
	}
	waitFor(t, 10*time.Second, "the second task completed", func() bool { return queueStats(t, c, q).Completed == 2 })

	// 50 concurrent enqueues of a fresh key: one task, 49 duplicates.
	var mu sync.Mutex
	var added, dups int
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			_, err := c.Enqueue(ctx, NewTask("noop", nil), Queue(q+"-race"), Unique("once", time.Minute))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				added++
			case errors.Is(err, ErrDuplicate):
				dups++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if added != 1 || dups != 49 {
		t.Fatalf("50 racing enqueues: %d added, %d duplicates", added, dups)
	}
}

// Debounce: a burst of enqueues with one key leaves one task, due the
// delay after the last, with the last payload; once it ran, the next
// enqueue makes a new task.
func TestDebounceKeepsTheLastPayload(t *testing.T) {
	t.Parallel() // waits on the debounce delays (main_test.go)
	addr := testRedis(t)
	c := newClient(t, addr)
	ctx := t.Context()
	q := uniq(t, "debounce")
	var ids []string
	for i := range 5 {
		info, err := c.Enqueue(ctx, NewTask("save", []byte{byte('0' + i)}), Queue(q), Debounce("doc:7", 500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && info.Replaced != ids[i-1] {
			t.Fatalf("enqueue %d replaced %q, want %s", i, info.Replaced, ids[i-1])
		}
		ids = append(ids, info.ID)
	}
	if st := queueStats(t, c, q); st.Scheduled != 1 {
		t.Fatalf("after 5 debounced enqueues: %d scheduled, want 1", st.Scheduled)
	}
	var mu sync.Mutex
	var ran []string
	w, err := NewWorker(WorkerConfig{Redis: addr, Queues: []QueueSpec{{Name: q}}})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("save", func(_ context.Context, tk *Task) error {
		mu.Lock()
		ran = append(ran, tk.ID()+"="+string(tk.Payload))
		mu.Unlock()
		return nil
	})
	runWorker(t, w)
	waitFor(t, 10*time.Second, "the debounced task ran", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 1 })
	if ran[0] != ids[4]+"=4" {
		t.Fatalf("ran %q, want the last task with the last payload (%s=4)", ran, ids[4])
	}
	next, err := c.Enqueue(ctx, NewTask("save", []byte("5")), Queue(q), Debounce("doc:7", 100*time.Millisecond))
	if err != nil || next.Replaced != "" {
		t.Fatalf("after the run: %+v %v; want a new task replacing nothing", next, err)
	}
	waitFor(t, 10*time.Second, "the next one ran", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 2 })
}
