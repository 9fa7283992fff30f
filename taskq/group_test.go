package taskq

import (
	"context"
	"fmt"
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
