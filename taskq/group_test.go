package taskq

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestAggregation: 10,000 tasks in 100 groups (max size 30, grace 2 s: far
// longer than the enqueues of one group take apart, even under -race on a
// loaded machine) reach the handler as batches: each group as three full
// batches of 30 and one of 10 after the grace; every member in exactly one
// batch, with its own payload; no record left behind.
func TestAggregation(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 8})
	var mu sync.Mutex
	sizes := map[string][]int{}
	seen := map[string]int{}
	w.Handle("mail", func(ctx context.Context, tk *Task) error {
		mu.Lock()
		defer mu.Unlock()
		sizes[tk.Group()] = append(sizes[tk.Group()], len(tk.Batch()))
		for _, m := range tk.Batch() {
			if string(m.Payload) != m.ID() {
				return fmt.Errorf("member %s has payload %q", m.ID(), m.Payload)
			}
			seen[m.ID()]++
		}
		return nil
	})
	runWorker(t, w)
	p := GroupPolicy{MaxSize: 30, Grace: 2 * time.Second, MaxDelay: time.Minute}
	for i := range 10000 {
		id := fmt.Sprint("m", i)
		if _, err := c.Enqueue(ctx, NewTask("mail", []byte(id)), Queue(q), TaskID(id), Group(fmt.Sprint("g", i%100), p)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "every member handed over", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 10000
	})
	waitFor(t, 10*time.Second, "the batches acknowledged", func() bool { return queueStats(t, c, q).Completed == 400 })
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("member %s handed over %d times", id, n)
		}
	}
	for g, s := range sizes {
		slices.Sort(s)
		if !slices.Equal(s, []int{10, 30, 30, 30}) {
			t.Fatalf("group %s's batches: %v; want 30, 30, 30 and 10", g, s)
		}
	}
	left, err := taskRecords(t, addr, q)
	if err != nil || left != 0 {
		t.Fatalf("task records left: %d, %v; want 0", left, err)
	}
}

// TestBatchKeepsHugeNumbers: a batch's message is its first member's with
// the batch's fields added; a number Lua's JSON cannot write exactly (a
// MaxRetries of math.MaxInt: "retry for ever") comes through as it was, so
// the batch is served, not dead-lettered as malformed.
func TestBatchKeepsHugeNumbers(t *testing.T) {
	addr := testRedis(t)
	q := uniq(t, "bigr")
	ctx := t.Context()
	r, c := openRDB(t, addr), newClient(t, addr)
	for _, id := range []string{"a", "b"} {
		if _, err := c.Enqueue(ctx, NewTask("T", []byte("p")), Queue(q), TaskID(id), MaxRetries(math.MaxInt), Timeout(time.Hour), Group("k", GroupPolicy{MaxSize: 2})); err != nil {
			t.Fatal(err)
		}
	}
	res, err := r.Dequeue(ctx, []string{q}, 10, time.Now(), time.Now().Add(time.Minute))
	if err != nil || len(res.Tasks) != 1 {
		t.Fatalf("dequeue: %+v %v; want the one batch", res, err)
	}
	d := res.Tasks[0]
	m, err := decodeMessage(d.ID, d.Queue, d.Msg)
	if err != nil {
		t.Fatalf("the batch's message %q: %v", d.Msg, err)
	}
	if m.MaxRetries != math.MaxInt || !slices.Equal(m.Batch, []string{"a", "b"}) || m.Group != "k" || m.TimeoutMS != time.Hour.Milliseconds() || m.Type != "T" {
		t.Fatalf("batch message %+v; want max retries MaxInt, batch [a b], group k, the members' timeout and type", m)
	}
}
