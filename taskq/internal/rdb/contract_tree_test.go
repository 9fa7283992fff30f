package rdb

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantryhq/gantry/internal/testutil"
)

// tasksOf are n tasks of tenant, ids prefix1..prefixn.
func tasksOf(prefix, tenant string, n int) []EnqMsg {
	out := make([]EnqMsg, n)
	for i := range out {
		out[i] = task(prefix+itoa(i+1), tenant)
	}
	return out
}

// deqOneByOne dequeues n times one task at t0 and returns the ids.
func deqOneByOne(t *testing.T, r *RDB, q string, n int) []string {
	t.Helper()
	ids := []string{}
	for range n {
		ids = append(ids, order(deq(t, r, []string{q}, 1, t0))...)
	}
	return ids
}

// TestDequeueTree: path tenants are served by hierarchical start-time fair
// queuing. Orgs x and y (weight 1 each) share the root; x's teams a
// (weight 1) and b (weight 3, set as a limit of the node x/b) share x. By
// hand: every pick advances the tags on its path by 1/weight, the root
// alternates x and y, x gives b three picks per one of a (ties go to the
// smaller name). One call of n tasks gives the same order as n calls.
func TestDequeueTree(t *testing.T) {
	r := openTest(t)
	want := []string{"a1", "w1", "v1", "w2", "v2", "w3", "v3", "w4", "a2", "w5", "v4", "w6"}
	for _, n := range []int{1, len(want)} {
		q := newQueue(t, r, "q")
		enqueue(t, r, q, tasksOf("a", "x/a/u", 8)...)
		enqueue(t, r, q, tasksOf("v", "x/b/v", 8)...)
		enqueue(t, r, q, tasksOf("w", "y/w", 8)...)
		setLimit(t, r, q, "x/b", Limit{Weight: 3})
		var got []string
		if n == 1 {
			got = deqOneByOne(t, r, q, len(want))
		} else {
			got = order(deq(t, r, []string{q}, n, t0))
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%d per call: order (-want +got):\n%s", n, d)
		}
		s := snap(t, r, q)
		if d := cmp.Diff([]Z{{"x/", 6}, {"y/", 6}}, s.Tenants); d != "" {
			t.Errorf("%d per call: root tags (-want +got):\n%s", n, d)
		}
		wantTree := []string{"x/\x00" + tagKey(2) + "\x00x/a/", "x/\x00" + tagKey(4.0/3) + "\x00x/b/",
			"x/a/\x00" + tagKey(2) + "\x00x/a/u", "x/b/\x00" + tagKey(4) + "\x00x/b/v", "y/\x00" + tagKey(6) + "\x00y/w"}
		if d := cmp.Diff(zsetMembers(wantTree), s.Tree); d != "" {
			t.Errorf("%d per call: tree (-want +got):\n%s", n, d)
		}
	}
}

// tagKey is lib.lua's tag_key (the tag's digits in a tree member).
func tagKey(tag float64) string { return fmt.Sprintf("%020.6f", tag) }

// zsetMembers are the members of a ZSET whose scores are all 0, sorted.
func zsetMembers(ms []string) []Z {
	zs := make([]Z, len(ms))
	for i, m := range ms {
		zs[i] = Z{m, 0}
	}
	return zset(zs...)
}

// TestDequeueTreeNewcomers: an idle node that becomes active starts at its
// parent's virtual time: a new user of a busy team, a new team of a busy
// org and a new org are each served next, ahead of the backlog.
func TestDequeueTreeNewcomers(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	enqueue(t, r, q, tasksOf("u", "x/a/u", 20)...)
	if got := len(deqOneByOne(t, r, q, 5)); got != 5 {
		t.Fatalf("dequeued %d of the backlog, want 5", got)
	}
	for _, c := range []struct{ tenant, id string }{{"x/a/z", "z1"}, {"x/b/v", "v1"}, {"y/w", "w1"}, {"flat", "f1"}} {
		enqueue(t, r, q, task(c.id, c.tenant))
		if d := cmp.Diff([]string{c.id}, deqOneByOne(t, r, q, 1)); d != "" {
			t.Errorf("newcomer %s (-want +got):\n%s", c.tenant, d)
		}
	}
}

// TestDequeueTreePauseAndLimit: a paused path tenant leaves the tree (its
// org's other users go on) and re-enters on resume; a path tenant at its
// in-flight cap is parked and comes back when its task ends; a drained
// tree leaves no node behind.
func TestDequeueTreePauseAndLimit(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	enqueue(t, r, q, tasksOf("u", "x/a/u", 2)...)
	enqueue(t, r, q, tasksOf("v", "x/a/v", 2)...)
	if err := r.Pause(t.Context(), q, "x/a/u", Forever); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"v1", "v2"}, order(deq(t, r, []string{q}, 10, t0))); d != "" {
		t.Errorf("while x/a/u is paused (-want +got):\n%s", d)
	}
	if err := r.Resume(t.Context(), q, "x/a/u"); err != nil {
		t.Fatal(err)
	}
	setLimit(t, r, q, "x/a/u", Limit{MaxActive: 1})
	if d := cmp.Diff([]string{"u1"}, order(deq(t, r, []string{q}, 10, t0))); d != "" {
		t.Errorf("at the cap (-want +got):\n%s", d)
	}
	ack(t, r, q, t0, "u1")
	if d := cmp.Diff([]string{"u2"}, order(deq(t, r, []string{q}, 10, t0))); d != "" {
		t.Errorf("after an ack (-want +got):\n%s", d)
	}
	s := snap(t, r, q)
	for f := range s.State {
		if strings.HasPrefix(f, "n:") {
			t.Errorf("state keeps %s after the drain", f)
		}
	}
	if len(s.Tree) != 0 || len(s.Tenants) != 0 {
		t.Errorf("after the drain: tenants %v, tree %v; want both empty", s.Tenants, s.Tree)
	}
}

// TestDequeueTreeNodeLimits: limits on an inner node hold for all the
// tenants below it: org x's in-flight cap of 1 lets one of its tasks run
// at a time (its node parked until one ends, y served meanwhile), and team
// x/a's rate of 1/s gives it one task a second.
func TestDequeueTreeNodeLimits(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	enqueue(t, r, q, tasksOf("u", "x/a/u", 3)...)
	enqueue(t, r, q, tasksOf("v", "x/b/v", 3)...)
	enqueue(t, r, q, tasksOf("w", "y/w", 3)...)
	setLimit(t, r, q, "x", Limit{MaxActive: 1})
	if d := cmp.Diff([]string{"u1", "w1", "w2", "w3"}, order(deq(t, r, []string{q}, 10, t0))); d != "" {
		t.Errorf("x at its cap (-want +got):\n%s", d)
	}
	if s := snap(t, r, q); s.State["a:x/"] != "1" || len(s.Throttled) != 1 || s.Throttled[0].M != "x/" {
		t.Errorf("a:x/ = %q, throttled %v; want 1 and x/ held", s.State["a:x/"], s.Throttled)
	}
	ack(t, r, q, t0, "u1")
	if d := cmp.Diff([]string{"v1"}, order(deq(t, r, []string{q}, 10, t0))); d != "" {
		t.Errorf("after u1's ack (-want +got):\n%s", d)
	}
	ack(t, r, q, t0, "v1")
	if _, err := r.ClearLimit(t.Context(), q, "x", false); err != nil {
		t.Fatal(err)
	}
	setLimit(t, r, q, "x/a", Limit{Rate: 1, Burst: 1})
	if d := cmp.Diff([]string{"u2", "v2", "v3"}, order(deq(t, r, []string{q}, 10, at(time.Second)))); d != "" {
		t.Errorf("x/a at 1/s (-want +got):\n%s", d)
	}
	res := deq(t, r, []string{q}, 10, at(1500*time.Millisecond))
	if len(res.Tasks) != 0 || !res.Retry.Equal(at(2*time.Second)) {
		t.Errorf("half a second later: %v, next token at %v; want none until %v", order(res), res.Retry, at(2*time.Second))
	}
	if d := cmp.Diff([]string{"u3"}, order(deq(t, r, []string{q}, 10, at(2*time.Second)))); d != "" {
		t.Errorf("a second later (-want +got):\n%s", d)
	}
}

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
