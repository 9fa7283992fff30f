package rdb

import (
	"slices"
	"testing"
	"time"
)

// The extras set (lib.lua extras): a task with no field beside its value
// is acked by deleting that one field and dequeued by reading only it; the
// scripts keep the set complete, and a queue written by an earlier release
// (no xt) is served as if every task had extra fields until the
// maintainer's scan (TrackExtras) has made the set complete.

// extrasOf is q's extras set, sorted, and whether q trusts it (xt).
func extrasOf(t *testing.T, r *RDB, q string) (ids []string, tracked bool) {
	t.Helper()
	k := QueueKeys(q)
	ids, err := r.c.Do(t.Context(), r.c.B().Smembers().Key(k[KExtras]).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	tracked, err = r.c.Do(t.Context(), r.c.B().Hexists().Key(k[KState]).Field("xt").Build()).AsBool()
	if err != nil {
		t.Fatal(err)
	}
	return ids, tracked
}

// tasksHash is q's tasks hash as stored.
func tasksHash(t *testing.T, r *RDB, q string) map[string]string {
	t.Helper()
	h, err := r.c.Do(t.Context(), r.c.B().Hgetall().Key(QueueKeys(q)[KTasks]).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestExtrasFollowATaskThroughItsLife: a clean task never enters the set;
// a retried one does, is dequeued with its retry count and leaves nothing
// behind when acked, set included.
func TestExtrasFollowATaskThroughItsLife(t *testing.T) {
	r := openTest(t)
	ctx := t.Context()
	q := newQueue(t, r, "q")
	enqueue(t, r, q, task("clean", "a"), task("retried", "a"))
	if ids, tracked := extrasOf(t, r, q); !tracked || len(ids) != 0 {
		t.Fatalf("a new queue: extras %v, tracked %v; want none, tracked", ids, tracked)
	}
	if got := dequeue(t, r, q, 2); len(got) != 2 {
		t.Fatalf("dequeued %v", got)
	}
	if _, err := r.Fail(ctx, q, "retried", t0, "boom", at(time.Second), ""); err != nil {
		t.Fatal(err)
	}
	if ids, _ := extrasOf(t, r, q); !slices.Equal(ids, []string{"retried"}) {
		t.Fatalf("after a retry: extras %v, want [retried]", ids)
	}
	if n, err := r.Ack(ctx, q, t0, []AckItem{{ID: "clean"}}); err != nil || n != 1 {
		t.Fatalf("ack clean: %d, %v", n, err)
	}
	deq, err := r.Dequeue(ctx, []string{q}, 1, at(2*time.Second), at(time.Minute))
	if err != nil || len(deq.Tasks) != 1 {
		t.Fatalf("dequeue the retry: %+v, %v", deq, err)
	}
	if d := deq.Tasks[0]; d.ID != "retried" || d.Retried != 1 || d.Starts != 2 {
		t.Fatalf("the retry dequeued as %+v, want retried 1, starts 2", d)
	}
	if _, err := r.Progress(ctx, q, "retried", `{"n":1}`); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Ack(ctx, q, at(2*time.Second), []AckItem{{ID: "retried"}}); err != nil || n != 1 {
		t.Fatalf("ack retried: %d, %v", n, err)
	}
	if h := tasksHash(t, r, q); len(h) != 0 {
		t.Errorf("tasks hash after both acks: %v, want empty", h)
	}
	if ids, tracked := extrasOf(t, r, q); !tracked || len(ids) != 0 {
		t.Errorf("extras after both acks: %v (tracked %v), want none", ids, tracked)
	}
}

// TestAQueueOfAnEarlierReleaseIsServedThenTracked: a queue without xt
// whose tasks carry fields the set does not name (as an earlier release
// left them) is dequeued and acked in full; TrackExtras then adds every
// such task and sets xt, after which a retried task still reports its
// retries and is acked clean.
func TestAQueueOfAnEarlierReleaseIsServedThenTracked(t *testing.T) {
	r := openTest(t)
	ctx := t.Context()
	q := newQueue(t, r, "q")
	enqueue(t, r, q, task("a", "t"), task("b", "t"), task("c", "t"), task("d|x", "t"))
	k := QueueKeys(q)
	// The earlier release: no xt, and fields written without the set.
	for _, c := range [][]string{
		{"HDEL", k[KState], "xt"},
		{"HSET", k[KTasks], "a|r", "2", "a|e", "boom"},
		{"HSET", k[KTasks], "b|r", "1"},
		{"HSET", k[KTasks], "c|p", "{}"},
		{"HSET", k[KTasks], "d|x|r", "4"}, // an id may hold a '|'
	} {
		if err := r.c.Do(ctx, r.c.B().Arbitrary(c[0]).Keys(c[1]).Args(c[2:]...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	deq, err := r.Dequeue(ctx, []string{q}, 1, t0, at(time.Minute))
	if err != nil || len(deq.Tasks) != 1 || deq.Tasks[0].ID != "a" || deq.Tasks[0].Retried != 2 {
		t.Fatalf("untracked dequeue: %+v, %v; want a with 2 retries", deq.Tasks, err)
	}
	if _, err := r.Ack(ctx, q, t0, []AckItem{{ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	if h := tasksHash(t, r, q); h["a|r"] != "" || h["a|e"] != "" || h["a"] != "" {
		t.Fatalf("untracked ack left a's fields: %v", h)
	}
	if _, err := r.TrackExtras(ctx, q, ScanPos{}, 0); err != nil {
		t.Fatal(err)
	}
	if ids, tracked := extrasOf(t, r, q); !tracked || !slices.Equal(ids, []string{"b", "c", "d|x"}) {
		t.Fatalf("after the scan: extras %v (tracked %v), want [b c d|x], tracked", ids, tracked)
	}
	deq, err = r.Dequeue(ctx, []string{q}, 3, t0, at(time.Minute))
	if err != nil || len(deq.Tasks) != 3 || deq.Tasks[0].ID != "b" || deq.Tasks[0].Retried != 1 || deq.Tasks[2].ID != "d|x" || deq.Tasks[2].Retried != 4 {
		t.Fatalf("tracked dequeue: %+v, %v; want b with 1 retry, c, d|x with 4", deq.Tasks, err)
	}
	if _, err := r.Ack(ctx, q, t0, []AckItem{{ID: "b"}, {ID: "c"}, {ID: "d|x"}}); err != nil {
		t.Fatal(err)
	}
	if h := tasksHash(t, r, q); len(h) != 0 {
		t.Errorf("tasks hash after the acks: %v, want empty", h)
	}
	if ids, _ := extrasOf(t, r, q); len(ids) != 0 {
		t.Errorf("extras after the acks: %v, want none", ids)
	}
}

// TestTrackExtrasScansInSteps: a scan of more fields than one step reads
// (about 1,000), made one step a call and resumed from the cursor each
// returns (as the maintainer does, a bounded number a tick), finds every
// task with an extra field, and is trusted only at its end.
func TestTrackExtrasScansInSteps(t *testing.T) {
	r := openTest(t)
	ctx := t.Context()
	q := newQueue(t, r, "q")
	const n = 2500
	msgs := make([]EnqMsg, n)
	for i := range msgs {
		msgs[i] = task("t"+itoa(i), "a")
	}
	enqueue(t, r, q, msgs...)
	k := QueueKeys(q)
	var want []string
	cmds := [][]string{{"HDEL", k[KState], "xt"}}
	for i := 0; i < n; i += 7 {
		cmds = append(cmds, []string{"HSET", k[KTasks], "t" + itoa(i) + "|r", "1"})
		want = append(want, "t"+itoa(i))
	}
	for _, c := range cmds {
		if err := r.c.Do(ctx, r.c.B().Arbitrary(c[0]).Keys(c[1]).Args(c[2:]...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	var pos ScanPos
	calls := 0
	for {
		next, err := r.TrackExtras(ctx, q, pos, 1)
		if err != nil {
			t.Fatal(err)
		}
		calls++
		if next.Done() {
			break
		}
		if _, tracked := extrasOf(t, r, q); tracked {
			t.Fatalf("tracked after %d of the scan's steps, before its end", calls)
		}
		if calls == 1 {
			// Another server (a failover): the cursor means nothing there.
			next.Server = "another"
			bogus, err := r.TrackExtras(ctx, q, ScanPos{Cursor: "12345", Server: "another"}, 1)
			if err != nil || bogus.Server == "another" {
				t.Fatalf("a step from another server's cursor: %+v, %v", bogus, err)
			}
			if bogus.Done() {
				t.Fatal("a step from another server's cursor 12345 ended the scan: it must begin again from 0")
			}
		}
		pos = next
	}
	if calls < 3 {
		t.Errorf("the scan of %d fields took %d steps, want several", n, calls)
	}
	slices.Sort(want)
	if ids, tracked := extrasOf(t, r, q); !tracked || !slices.Equal(ids, want) {
		t.Errorf("after the scan: %d in extras (tracked %v), want the %d with a field", len(ids), tracked, len(want))
	}
}

// TestEveryWayInTracksANewQueue: a queue whose first task comes through
// unique, a workflow or a group (not only enqueue) trusts its extras set
// at once: nothing of an earlier release is in it.
func TestEveryWayInTracksANewQueue(t *testing.T) {
	r := openTest(t)
	ctx := t.Context()
	for name, add := range map[string]func(q string) error{
		"unique": func(q string) error {
			_, _, _, err := r.EnqueueUnique(ctx, q, t0, ModeUnique, "k", at(time.Hour), task("u", "t"))
			return err
		},
		"workflow": func(q string) error {
			_, err := r.EnqueueWorkflow(ctx, q, t0, "wf1", "{}", []WfNode{{EnqMsg: task("w1", "t"), Children: []string{"w2"}}, {EnqMsg: task("w2", "t"), Parents: 1}})
			return err
		},
		"group": func(q string) error {
			_, err := r.EnqueueGroup(ctx, q, t0, task("g1", "t"), "k", GroupPolicy{MaxSize: 2, Grace: time.Second, MaxDelay: time.Minute})
			return err
		},
	} {
		q := newQueue(t, r, name)
		if err := add(q); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, tracked := extrasOf(t, r, q); !tracked {
			t.Errorf("a new queue whose first task came through %s is not tracked", name)
		}
	}
}
