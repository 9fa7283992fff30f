package taskq

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// The tenant travels once: a new message does not carry it (the Redis
// member does), the handler and the dead-letter list still see it, and a
// message written by an earlier release (tenant inside the JSON) still runs
// under its tenant.
func TestTenantTravelsOnce(t *testing.T) {
	addr := testRedis(t)
	q := uniq(t, "q")
	c := newClient(t, addr)
	ctx := t.Context()
	info, err := c.Enqueue(ctx, NewTask("see", nil), Queue(q), Tenant("acme"))
	if err != nil {
		t.Fatal(err)
	}
	r := openRDB(t, addr)
	msgs, err := r.Messages(ctx, q, []string{info.ID}) // the message, without the member's head before it
	if err != nil {
		t.Fatal(err)
	}
	raw := string(msgs[info.ID])
	if raw == "" {
		t.Fatal("message missing")
	}
	if strings.Contains(raw, `"tenant"`) || strings.Contains(raw, "acme") {
		t.Fatalf("stored message carries the tenant: %s", raw)
	}
	// An earlier release's message: the tenant in the JSON and the member.
	old, _ := json.Marshal(map[string]any{"id": "old-1", "type": "see", "queue": q, "tenant": "legacy", "max_retries": 0, "enqueued_at": time.Now().UnixMilli()})
	if _, err := r.Enqueue(ctx, q, time.Now(), []rdb.EnqMsg{{ID: "old-1", Msg: string(old), Tenant: "legacy"}}); err != nil {
		t.Fatal(err)
	}
	enqueueRaw(t, c, q, "bad-1", "wiley")

	var mu sync.Mutex
	seen := map[string]string{}
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}})
	w.Handle("see", func(_ context.Context, tk *Task) error {
		mu.Lock()
		seen[tk.ID()] = tk.Tenant()
		mu.Unlock()
		return nil
	})
	runWorker(t, w)
	waitFor(t, 10*time.Second, "both tasks handled and the bad one buried", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 2 && queueStats(t, c, q).Dead == 1
	})
	if seen[info.ID] != "acme" || seen["old-1"] != "legacy" {
		t.Fatalf("handler saw tenants %v, want acme and legacy", seen)
	}
	dead, err := c.DeadLetters(ctx, q, 10)
	if err != nil || len(dead) != 1 || dead[0].Tenant != "wiley" {
		t.Fatalf("dead letters %+v (%v), want one of tenant wiley", dead, err)
	}
}

// enqueueRaw stores a task of an unknown type under tenant, so that it dies.
func enqueueRaw(t *testing.T, c *Client, q, id, tenant string) {
	t.Helper()
	if _, err := c.Enqueue(t.Context(), NewTask("nobody-handles-this", nil), Queue(q), Tenant(tenant), TaskID(id)); err != nil {
		t.Fatal(err)
	}
}
