package taskq

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// putPrevious stores task id (type typ, tenant, payload) in queue q the way
// the previous release's enqueue did (lib.lua's add_task then): the message
// as long-key JSON with the payload in base64, the member in a field id|m
// of its own, the member's seq in 16 hex digits; the task pending.
func putPrevious(t *testing.T, r *rdb.RDB, q, id, typ, tenant string, payload []byte) {
	t.Helper()
	ctx, c := t.Context(), r.Client()
	k := rdb.QueueKeys(q)
	msg, err := json.Marshal(message{ID: id, Type: typ, Payload: payload, Queue: q, MaxRetries: DefaultMaxRetries, EnqueuedAt: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := c.Do(ctx, c.B().Hincrby().Key(k[rdb.KState]).Field("seq").Increment(1).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	member := tenant + "\x00ff" + fmt.Sprintf("%016x", seq) + "\x00" + id
	for _, cmd := range [][]string{
		{"HSET", k[rdb.KTasks], id, string(msg), id + "|m", member},
		{"HSETNX", k[rdb.KState], "w:" + tenant, "1"},
		{"HINCRBY", k[rdb.KState], "enqueued", "1"},
		{"ZADD", k[rdb.KPending], "0", member},
		{"ZADD", k[rdb.KTenants], "NX", "0", tenant},
		{"LPUSH", k[rdb.KWake], "1"},
	} {
		if err := c.Do(ctx, c.B().Arbitrary(cmd[0]).Keys(cmd[1]).Args(cmd[2:]...).Build()).Error(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
}

// TestPreviousReleaseTasks: tasks the previous release enqueued (long JSON
// message, member in id|m) are read by the inspector, cancelled, served by
// a worker of this release in FIFO order before the tasks enqueued after
// them into the same queue, and dead-lettered and requeued, payloads intact.
func TestPreviousReleaseTasks(t *testing.T) {
	addr := testRedis(t)
	q := uniq(t, "compat")
	ctx := t.Context()
	r, c := openRDB(t, addr), newClient(t, addr)
	binary := []byte{0, 1, 2, 0xff, '{', 0}
	putPrevious(t, r, q, "old-1", "rec", "acme", []byte("first"))
	putPrevious(t, r, q, "old-2", "rec", "acme", binary)
	putPrevious(t, r, q, "old-doomed", "rec", "acme", []byte("fail once"))
	putPrevious(t, r, q, "old-cancel", "rec", "acme", nil)
	var newIDs []string
	for i, p := range [][]byte{[]byte("new"), binary, nil} {
		info, err := c.Enqueue(ctx, NewTask("rec", p), Queue(q), Tenant("acme"), TaskID("new-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		newIDs = append(newIDs, info.ID)
	}

	in := newInspector(t, addr)
	d, err := in.Get(ctx, q, "old-2")
	if err != nil || d.State != StatePending || d.Type != "rec" || d.Tenant != "acme" || d.MaxRetries != DefaultMaxRetries {
		t.Fatalf("inspector Get old-2: %+v, %v", d, err)
	}
	if d, err := in.Cancel(ctx, q, "old-cancel", "test"); err != nil || d.State != StateCancelled {
		t.Fatalf("cancel old-cancel: %+v, %v", d, err)
	}

	var mu sync.Mutex
	var order []string
	payloads := map[string]string{}
	failed := false
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 1, Prefetch: 1})
	w.Handle("rec", func(ctx context.Context, tk *Task) error {
		mu.Lock()
		defer mu.Unlock()
		if tk.ID() == "old-doomed" && !failed {
			failed = true
			return fmt.Errorf("first run: %w", SkipRetry)
		}
		order = append(order, tk.ID()+"@"+tk.Tenant())
		payloads[tk.ID()] = string(tk.Payload)
		return nil
	})
	runWorker(t, w)
	waitFor(t, 10*time.Second, "the old tasks dead or done and the new ones done", func() bool {
		st := queueStats(t, c, q)
		return st.Dead == 1 && st.Completed == 5 && st.Pending == 0 && st.Active == 0
	})
	dead, err := c.DeadLetters(ctx, q, 10)
	if err != nil || len(dead) != 1 || dead[0].ID != "old-doomed" || dead[0].Type != "rec" || dead[0].Tenant != "acme" {
		t.Fatalf("dead letters: %+v, %v", dead, err)
	}
	if n, err := c.RequeueDead(ctx, q, "old-doomed"); err != nil || n != 1 {
		t.Fatalf("requeue old-doomed: %d, %v", n, err)
	}
	waitFor(t, 10*time.Second, "the requeued old task done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 6
	})
	mu.Lock()
	defer mu.Unlock()
	want := []string{"old-1@acme", "old-2@acme", newIDs[0] + "@acme", newIDs[1] + "@acme", newIDs[2] + "@acme", "old-doomed@acme"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("served %q, want %q (FIFO across the formats)", order, want)
	}
	for id, p := range map[string]string{"old-1": "first", "old-2": string(binary), newIDs[0]: "new", newIDs[1]: string(binary), newIDs[2]: "", "old-doomed": "fail once"} {
		if payloads[id] != p {
			t.Errorf("payload of %s: %q, want %q", id, payloads[id], p)
		}
	}
}
