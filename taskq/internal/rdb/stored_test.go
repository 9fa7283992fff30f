package rdb

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestStoredLayout: an enqueued task is one field of the tasks hash, its
// value the member up to the seq behind "\x01", then the message; the
// member needs no field of its own, and the seq digits keep the members in
// enqueue order (also after the members of an earlier release, 16 hex
// digits) while rdb hands out the bare message.
func TestStoredLayout(t *testing.T) {
	r := openTest(t)
	ctx := t.Context()
	q := newQueue(t, r, "q")
	k := QueueKeys(q)
	// A task the previous release stored: its seq in 16 hex digits, its member in id|m.
	old := "a\x00ff" + "0000000000000041" + "\x00old"
	raw(t, r, "HSET", k[KTasks], "old", `{"id":"old"}`, "old|m", old)
	raw(t, r, "HSET", k[KState], "seq", "65")
	raw(t, r, "ZADD", k[KPending], "0", old)
	raw(t, r, "ZADD", k[KTenants], "0", "a")
	for _, id := range []string{"x", "y", "z"} {
		enqueue(t, r, q, task(id, "a"))
	}
	h, err := r.c.Do(ctx, r.c.B().Hgetall().Key(k[KTasks]).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"old": `{"id":"old"}`, "old|m": old,
		"x": "\x01a\x00ff" + seqDigits(66) + "m-x", "y": "\x01a\x00ff" + seqDigits(67) + "m-y", "z": "\x01a\x00ff" + seqDigits(68) + "m-z"}
	if len(h) != len(want) {
		t.Errorf("tasks hash %q, want %q", h, want)
	}
	for f, v := range want {
		if h[f] != v {
			t.Errorf("tasks[%q] = %q, want %q", f, h[f], v)
		}
	}
	deq, err := r.Dequeue(ctx, []string{q}, 4, t0, at(time.Minute))
	if err != nil || len(deq.Tasks) != 4 {
		t.Fatalf("dequeue: %+v, %v", deq.Tasks, err)
	}
	for i, id := range []string{"old", "x", "y", "z"} {
		d := deq.Tasks[i]
		msg := "m-" + id
		if id == "old" {
			msg = `{"id":"old"}`
		}
		if d.ID != id || string(d.Msg) != msg || d.Tenant != "a" {
			t.Errorf("dequeued #%d: %s %q (tenant %q), want %s %q (tenant a)", i, d.ID, d.Msg, d.Tenant, id, msg)
		}
	}
	for _, n := range []int{1, 63, 64, 4095, 4096, 1 << 30, 1<<48 - 2} {
		if a, b := seqDigits(n), seqDigits(n+1); a >= b || len(a) != 8 || strings.Contains(a, "\x00") {
			t.Errorf("seq %d: %q, then %q", n, a, b)
		}
	}
}

// TestGroupBatchCompact: a batch made of members whose messages are in
// format 1 (taskq's message.go: "\x01", the type, short-key JSON, then a
// NUL and the payload) keeps the format: the type, the first member's
// fields, the members (b), the group (g), when it was made (e), no payload.
func TestGroupBatchCompact(t *testing.T) {
	r := openTest(t)
	ctx := t.Context()
	q := newQueue(t, r, "q")
	p := GroupPolicy{MaxSize: 2, Grace: time.Second, MaxDelay: time.Second}
	for _, id := range []string{"m1", "m2"} {
		m := EnqMsg{ID: id, Msg: "\x01mail{\"r\":3,\"h\":{\"k\":\"v\"},\"e\":1}\x00payload of " + id, Tenant: "a"}
		if _, err := r.EnqueueGroup(ctx, q, t0, m, "g1", p); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := r.Dequeue(ctx, []string{q}, 5, t0, at(time.Minute))
	if err != nil || len(ds.Tasks) != 1 {
		t.Fatalf("dequeue the batch: %+v, %v", ds.Tasks, err)
	}
	msg := string(ds.Tasks[0].Msg)
	body, ok := strings.CutPrefix(msg, "\x01mail")
	if !ok || strings.Contains(body, "\x00") {
		t.Fatalf("the batch's message %q: want \\x01mail then JSON, no payload", msg)
	}
	var m struct {
		R int
		H map[string]string
		E int64
		B []string
		G string
	}
	if err := json.Unmarshal([]byte(body), &m); err != nil || m.R != 3 || m.H["k"] != "v" || m.E != t0.UnixMilli() ||
		len(m.B) != 2 || m.B[0] != "m1" || m.B[1] != "m2" || m.G != "g1" {
		t.Fatalf("the batch's message %q: %+v, %v", msg, m, err)
	}
}

// TestResultsAreNotCut: a handler's result is its bytes as set, even one
// that starts like a stored task's head ("\x01", a NUL, ten more bytes):
// Results (a workflow child's ParentResults) and Result agree.
func TestResultsAreNotCut(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	v := "\x01A\x00" + "0123456789" + "tail"
	raw(t, r, "HSET", QueueKeys(q)[KResults], "p", v)
	got, err := r.Results(t.Context(), q, []string{"p", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	if string(got["p"]) != v || len(got) != 1 {
		t.Fatalf("Results = %q; want p's bytes %q whole and nothing for missing", got, v)
	}
}
