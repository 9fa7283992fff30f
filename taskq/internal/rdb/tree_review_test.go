package rdb

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

// TestTreePauseRefusesInnerNodes: a pause or resume names a tenant, never
// an inner node of the tree ("x/a/"): refused, nothing changed.
func TestTreePauseRefusesInnerNodes(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	enqueue(t, r, q, tasksOf("u", "x/a/u", 2)...)
	for _, err := range []error{r.Pause(t.Context(), q, "x/a/", Forever), r.Resume(t.Context(), q, "x/a/")} {
		if err == nil || !strings.Contains(err.Error(), "inner node") {
			t.Fatalf("pause/resume of x/a/: %v; want a refusal naming an inner node", err)
		}
	}
	if got := order(deq(t, r, []string{q}, 10, t0)); !slices.Equal(got, []string{"u1", "u2"}) {
		t.Fatalf("served %v; want u1 u2", got)
	}
}

// TestTreeDropsStaleMembers: a member of the tree whose node has no tag
// (left behind by an earlier bug) is dropped by the dequeue that meets it,
// never served as a node at tag 0 (which looped the script for ever).
func TestTreeDropsStaleMembers(t *testing.T) {
	// A Redis of its own: were the script to loop again, it would hold
	// this one, not the Redis every other test shares.
	r, err := Open(testutil.StartRedis(t).Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	q := newQueue(t, r, "q")
	enqueue(t, r, q, tasksOf("v", "x/b/v", 3)...)
	raw(t, r, "ZADD", QueueKeys(q)[KTree], "0", "x/\x00"+strings.Repeat("0", 13)+".000000\x00x/a/")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	res, err := r.Dequeue(ctx, []string{q}, 10, t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if got := order(res); !slices.Equal(got, []string{"v1", "v2", "v3"}) {
		t.Fatalf("served %v; want v1 v2 v3", got)
	}
	for _, z := range snap(t, r, q).Tree {
		if strings.HasSuffix(z.M, "x/a/") {
			t.Fatalf("the stale member %q is still in the tree", z.M)
		}
	}
}

// TestTreeResumeUnderParkedNode: a path tenant whose pause ends while a
// node above it is parked at its cap goes back under that node, and the
// dequeue that resumed it (over two queues) goes on without an error, so
// the other queue's task it leased is handed out.
func TestTreeResumeUnderParkedNode(t *testing.T) {
	r := openTest(t)
	q, q2 := newQueue(t, r, "q"), newQueue(t, r, "q2")
	enqueue(t, r, q, tasksOf("v", "x/a/v", 3)...)
	enqueue(t, r, q, task("u1", "x/a/u"))
	setLimit(t, r, q, "x", Limit{MaxActive: 1})
	if err := r.Pause(t.Context(), q, "x/a/u", at(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := order(deq(t, r, []string{q}, 10, t0)); len(got) != 1 {
		t.Fatalf("served %v; want one task (x is capped at 1)", got)
	}
	enqueue(t, r, q2, task("f1", "flat"))
	res, err := r.Dequeue(t.Context(), []string{q2, q}, 10, at(2*time.Second), lease)
	if err != nil {
		t.Fatalf("dequeue over q2 and q after u's pause ended: %v", err)
	}
	if got := order(res); !slices.Contains(got, "f1") {
		t.Fatalf("served %v; want q2's f1", got)
	}
}

// TestTreePauseTwiceKeepsTheFinish: pausing a paused path tenant again
// leaves its last finish (what it was served) as it was.
func TestTreePauseTwiceKeepsTheFinish(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	enqueue(t, r, q, tasksOf("u", "x/a/u", 10)...)
	enqueue(t, r, q, tasksOf("v", "x/a/v", 10)...)
	enqueue(t, r, q, tasksOf("b", "x/b/b", 10)...)
	deqOneByOne(t, r, q, 8)
	if err := r.Pause(t.Context(), q, "x/a/u", Forever); err != nil {
		t.Fatal(err)
	}
	before := snap(t, r, q).State["f:x/a/u"]
	if err := r.Pause(t.Context(), q, "x/a/u", Forever); err != nil {
		t.Fatal(err)
	}
	if after := snap(t, r, q).State["f:x/a/u"]; after != before || before == "" || before == "0" {
		t.Fatalf("f:x/a/u %q before the second pause, %q after; want it kept (and not 0)", before, after)
	}
}

// TestTreeNodeCountsNeverNegative: a tenant with a '/' left flat in
// tenants by an earlier release is served flat and never counted in its
// nodes; its acks leave the nodes' in-flight counts at 0, not below.
func TestTreeNodeCountsNeverNegative(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	enqueue(t, r, q, tasksOf("u", "x/a", 3)...)
	k := QueueKeys(q)
	raw(t, r, "DEL", k[KTree])
	raw(t, r, "ZREM", k[KTenants], "x/")
	raw(t, r, "HDEL", k[KState], "n:x/a")
	raw(t, r, "ZADD", k[KTenants], "0", "x/a")
	got := order(deq(t, r, []string{q}, 10, t0))
	ack(t, r, q, t0, got...)
	if v := snap(t, r, q).State["a:x/"]; v != "" && v != "0" {
		t.Fatalf("a:x/ = %q after the acks; want 0", v)
	}
}
