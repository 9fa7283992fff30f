package rdb

import (
	"fmt"
	"testing"
	"time"
)

// running enqueues x, y (tenant a) and z (tenant b), dequeues all three
// with the lease `lease`, gives x a progress report and empties the wake
// list.
func running(t *testing.T, r *RDB, q string) {
	t.Helper()
	enqueue(t, r, q, task("x", "a"), task("y", "a"), task("z", "b"))
	if ids := dequeue(t, r, q, 3); len(ids) != 3 {
		t.Fatalf("dequeued %v, want 3 tasks", ids)
	}
	raw(t, r, "HSET", QueueKeys(q)[KTasks], "x|p", `{"done":1}`)
	clearWake(t, r, q)
}

// Members of the tasks running leaves.
var (
	rx, ry, rz = member("a", 0, 1, "x"), member("a", 0, 2, "y"), member("b", 0, 3, "z")
)

// ackCall runs ack.lua (through Ack) at t0.
func ackCall(items ...AckItem) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		n, err := r.Ack(t.Context(), q, t0, items)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// finished edits s for task id (member m) leaving active and lease.
func finished(s *Snap, id, m string) {
	delete(s.Active, id)
	s.Lease = del(s.Lease, id)
	t := TenantOf(m)
	s.State["a:"+t] = itoa(atoi(s.State["a:"+t]) - 1)
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// forgot edits s for task id leaving no field behind.
func forgot(s *Snap, id string) {
	for _, f := range []string{"", "|r", "|n", "|e", "|d", "|m", "|c", "|p", "|s"} {
		delete(s.Tasks, id+f)
	}
	delete(s.Results, id)
}

// TestAckContract: ack.lua takes each task still held out of active and
// lease, counts processed, completed and c:<tenant> (a:<tenant> down),
// retains it (message and progress kept, completed: id -> keep_until, its
// result unless ”) or deletes everything of it, counts a task no longer
// held in state.late and leaves it alone, and makes a tenant or the queue
// held at its in-flight cap due again (a token each).
func TestAckContract(t *testing.T) {
	completed := func(s *Snap, ids ...string) {
		for _, id := range ids {
			m := map[string]string{"x": rx, "y": ry, "z": rz}[id]
			finished(s, id, m)
			tn := TenantOf(m)
			s.State["c:"+tn] = itoa(atoi(s.State["c:"+tn]) + 1)
		}
		s.State["completed"] = itoa(atoi(s.State["completed"]) + len(ids))
		s.State["processed"] = itoa(atoi(s.State["processed"]) + len(ids))
	}
	runContracts(t, []contract{{
		name:  "deleted at once",
		setup: running,
		call:  ackCall(AckItem{ID: "x"}),
		want:  1,
		edit:  func(s *Snap, q string) { completed(s, "x"); forgot(s, "x") },
	}, {
		name:  "keep_until at now: deleted at once, result dropped",
		setup: running,
		call:  ackCall(AckItem{ID: "x", KeepUntil: t0, Result: []byte("r")}),
		want:  1,
		edit:  func(s *Snap, q string) { completed(s, "x"); forgot(s, "x") },
	}, {
		name:  "retained with its result",
		setup: running,
		call:  ackCall(AckItem{ID: "x", KeepUntil: at(time.Hour), Result: []byte("r")}, AckItem{ID: "z", KeepUntil: at(time.Hour)}),
		want:  2,
		edit: func(s *Snap, q string) {
			completed(s, "x", "z")
			s.Completed = zset(Z{"x", msf(at(time.Hour))}, Z{"z", msf(at(time.Hour))})
			s.Results = map[string]string{"x": "r"}
		},
	}, {
		name:  "a lost lease: state.late, nothing else",
		setup: running,
		call:  ackCall(AckItem{ID: "gone"}),
		want:  0,
		edit:  func(s *Snap, q string) { s.State["late"] = "1" },
	}, {
		name:  "a batch over tenants, one lost",
		setup: running,
		call:  ackCall(AckItem{ID: "x"}, AckItem{ID: "gone"}, AckItem{ID: "z"}),
		want:  2,
		edit: func(s *Snap, q string) {
			completed(s, "x", "z")
			forgot(s, "x")
			forgot(s, "z")
			s.State["late"] = "1"
		},
	}, {
		// The same task twice in one batch (a re-delivered task acked by
		// both runs) is one completion: counting it twice drove a:<tenant>
		// below the tasks running, past the tenant's in-flight cap.
		name:  "the same id twice in a batch counts once",
		setup: running,
		call:  ackCall(AckItem{ID: "x"}, AckItem{ID: "x"}),
		want:  1,
		edit: func(s *Snap, q string) {
			completed(s, "x")
			forgot(s, "x")
			s.State["late"] = "1"
		},
	}, {
		name: "a tenant and the queue held at their caps become due",
		setup: func(t *testing.T, r *RDB, q string) {
			running(t, r, q)
			raw(t, r, "ZADD", QueueKeys(q)[KThrottled], "1e15", "a", "1e15", "\x00q", "1e15", "b", "500", "c")
		},
		call: ackCall(AckItem{ID: "x"}),
		want: 1,
		edit: func(s *Snap, q string) {
			completed(s, "x")
			forgot(s, "x")
			s.Throttled = zset(Z{"a", 0}, Z{"\x00q", 0}, Z{"b", 1e15}, Z{"c", 500})
			s.Wake = tokens(2)
		},
	}})
}

// TestAckAndDequeueBeyondAChunk: a run of 2,500 tasks is dequeued and
// acknowledged in one call each (lib.lua's chunked splits the commands at
// 1,000 items: Lua's unpack has a stack limit).
func TestAckAndDequeueBeyondAChunk(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	msgs := make([]EnqMsg, 2500)
	items := make([]AckItem, len(msgs))
	for i := range msgs {
		msgs[i] = task(fmt.Sprint("t", i), "a")
		items[i] = AckItem{ID: msgs[i].ID}
	}
	enqueue(t, r, q, msgs...)
	if ids := dequeue(t, r, q, len(msgs)); len(ids) != len(msgs) || ids[0] != "t0" || ids[len(ids)-1] != "t2499" {
		t.Fatalf("dequeued %d tasks, want %d in order", len(ids), len(msgs))
	}
	if n, err := r.Ack(t.Context(), q, t0, items); err != nil || n != len(items) {
		t.Fatalf("ack: %d held, %v; want %d", n, err, len(items))
	}
	s := snap(t, r, q)
	if len(s.Tasks)+len(s.Active)+len(s.Lease)+len(s.Pending) != 0 || s.State["completed"] != "2500" || s.State["a:a"] != "0" {
		t.Errorf("after the ack: %d task fields, %d active, %d leases, %d pending, completed %s, a:a %s; want none left, 2500, 0",
			len(s.Tasks), len(s.Active), len(s.Lease), len(s.Pending), s.State["completed"], s.State["a:a"])
	}
}

// failCall runs fail.lua (through Fail) at t0.
func failCall(id string, retryAt time.Time, reason string) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		n, err := r.Fail(t.Context(), q, id, t0, "boom", retryAt, reason)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// TestFailContract: fail.lua releases the task and counts processed and
// failed; a retried task waits in retry (member -> retry_at) with its
// retried count up, its last error, and no progress (the next attempt
// reports its own); a dead one goes to dead (id -> now) with error, reason
// and member, its progress kept, state.deadtotal up; a task no longer held
// is only counted in state.late.
func TestFailContract(t *testing.T) {
	failed := func(s *Snap) {
		finished(s, "x", rx)
		s.State["processed"], s.State["failed"] = "1", "1"
		s.Tasks["x|e"] = "boom"
	}
	runContracts(t, []contract{{
		name:  "retried",
		setup: running,
		call:  failCall("x", at(time.Minute), ""),
		want:  FailRetried,
		edit: func(s *Snap, q string) {
			failed(s)
			delete(s.Tasks, "x|p")
			s.Tasks["x|r"] = "1"
			s.Retry = []Z{{rx, msf(at(time.Minute))}}
		},
	}, {
		name: "retried again",
		setup: func(t *testing.T, r *RDB, q string) {
			running(t, r, q)
			raw(t, r, "HSET", QueueKeys(q)[KTasks], "x|r", "3")
		},
		call: failCall("x", at(time.Minute), ""),
		want: FailRetried,
		edit: func(s *Snap, q string) {
			failed(s)
			delete(s.Tasks, "x|p")
			s.Tasks["x|r"] = "4"
			s.Retry = []Z{{rx, msf(at(time.Minute))}}
		},
	}, {
		name:  "dead",
		setup: running,
		call:  failCall("x", time.Time{}, "max retries"),
		want:  FailDead,
		edit: func(s *Snap, q string) {
			failed(s)
			s.Tasks["x|d"] = "max retries"
			s.Dead = []Z{{"x", msf(t0)}}
			s.State["deadtotal"] = "1"
		},
	}, {
		name: "snoozed: scheduled, no failure, no attempt, one more snooze",
		setup: func(t *testing.T, r *RDB, q string) {
			running(t, r, q)
			raw(t, r, "HSET", QueueKeys(q)[KTasks], "x|r", "2", "x|s", "4")
		},
		call: func(t *testing.T, r *RDB, q string) any {
			n, err := r.Snooze(t.Context(), q, "x", t0, at(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
		want: FailSnoozed,
		edit: func(s *Snap, q string) {
			finished(s, "x", rx)
			delete(s.Tasks, "x|p")
			s.State["snoozed"] = "1"
			s.Tasks["x|s"] = "5"
			s.Scheduled = []Z{{rx, msf(at(time.Minute))}}
		},
	}, {
		name:  "lost: state.late only",
		setup: running,
		call:  failCall("gone", at(time.Minute), ""),
		want:  FailLost,
		edit:  func(s *Snap, q string) { s.State["late"] = "1" },
	}, {
		name: "its tenant held at its cap becomes due",
		setup: func(t *testing.T, r *RDB, q string) {
			running(t, r, q)
			raw(t, r, "ZADD", QueueKeys(q)[KThrottled], "1e15", "a")
		},
		call: failCall("x", time.Time{}, "r"),
		want: FailDead,
		edit: func(s *Snap, q string) {
			failed(s)
			s.Tasks["x|d"] = "r"
			s.Dead = []Z{{"x", msf(t0)}}
			s.State["deadtotal"] = "1"
			s.Throttled = []Z{{"a", 0}}
			s.Wake = tokens(1)
		},
	}})
}

// TestRequeueContract: requeue.lua gives held tasks back to pending with
// their member unchanged (their place in the tenant's order), their start
// uncounted (starts are attempts and lost leases) and their progress
// dropped, a:<t> down, the tenant back in tenants at
// max(vt, f:<t>), one token; ids no longer held are skipped.
func TestRequeueContract(t *testing.T) {
	call := func(ids ...string) func(t *testing.T, r *RDB, q string) any {
		return func(t *testing.T, r *RDB, q string) any {
			n, err := r.Requeue(t.Context(), q, ids)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	runContracts(t, []contract{{
		name:  "two of one tenant, one lost, one twice",
		setup: running,
		call:  call("y", "gone", "x", "y"),
		want:  2,
		edit: func(s *Snap, q string) {
			finished(s, "x", rx)
			finished(s, "y", ry)
			delete(s.Tasks, "x|p") // the next start reports its own
			s.Pending = zset(Z{rx, 0}, Z{ry, 0})
			s.Tenants = []Z{{"a", 2}} // f:a 2 after two tasks, vt 1
			s.Wake = tokens(1)
		},
	}, {
		name:  "none held: no token",
		setup: running,
		call:  call("gone"),
		want:  0,
	}})
	// The next run of a requeued task is its first again: no duplicate.
	r := openTest(t)
	q := newQueue(t, r, "q")
	running(t, r, q)
	if _, err := r.Requeue(t.Context(), q, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	res := deq(t, r, []string{q}, 1, t0)
	if len(res.Tasks) != 1 || res.Tasks[0].ID != "x" || res.Tasks[0].Starts != 1 {
		t.Fatalf("after requeue, dequeued %+v; want x with starts 1", res.Tasks)
	}
	if s := snap(t, r, q); s.State["dup"] != "" {
		t.Errorf("state.dup = %q after a requeued task ran again, want none", s.State["dup"])
	}
}

// TestExtendContract: extend.lua sets the lease of each id still leased
// to lease_until (ZADD XX: never creates one) when its end is one the
// caller may have set, and returns the ids whose lease is gone or held by
// a later dequeue; an unchanged lease is not lost.
func TestExtendContract(t *testing.T) {
	held := lease.UnixMilli()
	call := func(until time.Time, leases ...Lease) func(t *testing.T, r *RDB, q string) any {
		return func(t *testing.T, r *RDB, q string) any {
			lost, err := r.Extend(t.Context(), q, until, leases)
			if err != nil {
				t.Fatal(err)
			}
			return lost
		}
	}
	runContracts(t, []contract{{
		name:  "held and lost",
		setup: running,
		call:  call(at(time.Minute), Lease{ID: "x", Held: held}, Lease{ID: "gone", Held: held}, Lease{ID: "z", Held: held}),
		want:  []string{"gone"},
		edit: func(s *Snap, q string) {
			s.Lease = put(put(s.Lease, "x", msf(at(time.Minute))), "z", msf(at(time.Minute)))
		},
	}, {
		name:  "the same lease again: not lost",
		setup: running,
		call:  call(lease, Lease{ID: "x", Held: held}),
		want:  []string{},
	}, {
		name:  "an earlier time is set too",
		setup: running,
		call:  call(at(time.Second), Lease{ID: "x", Held: held}),
		want:  []string{},
		edit:  func(s *Snap, q string) { s.Lease = put(s.Lease, "x", msf(at(time.Second))) },
	}, {
		name:  "leased again since (another end): lost, left alone",
		setup: running,
		call:  call(at(time.Minute), Lease{ID: "x", Held: held - 1}, Lease{ID: "y", Held: held}),
		want:  []string{"x"},
		edit:  func(s *Snap, q string) { s.Lease = put(s.Lease, "y", msf(at(time.Minute))) },
	}, {
		name:  "the end of an unanswered extend: held",
		setup: running,
		call:  call(at(time.Minute), Lease{ID: "x", Held: held - 5000, Maybe: []int64{held - 1, held}}),
		want:  []string{},
		edit:  func(s *Snap, q string) { s.Lease = put(s.Lease, "x", msf(at(time.Minute))) },
	}})
}

// TestProgressContract: progress.lua writes id|p of a running task only.
func TestProgressContract(t *testing.T) {
	call := func(id string) func(t *testing.T, r *RDB, q string) any {
		return func(t *testing.T, r *RDB, q string) any {
			ok, err := r.Progress(t.Context(), q, id, `{"n":2}`)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
	}
	waiting := func(t *testing.T, r *RDB, q string) {
		running(t, r, q)
		enqueue(t, r, q, task("w", "a"))
		clearWake(t, r, q)
	}
	runContracts(t, []contract{{
		name:  "running",
		setup: running,
		call:  call("y"),
		want:  true,
		edit:  func(s *Snap, q string) { s.Tasks["y|p"] = `{"n":2}` },
	}, {
		name:  "pending: not written",
		setup: waiting,
		call:  call("w"),
		want:  false,
	}, {
		name:  "unknown: not written",
		setup: running,
		call:  call("gone"),
		want:  false,
	}})
}

// TestStaleAckLeavesNoFields: a worker whose lease was lost acks while the
// task is active again under another worker that reported progress: the
// task is completed once and nothing of it is left behind (a lost start,
// progress), however its fields came to be.
func TestStaleAckLeavesNoFields(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	enqueue(t, r, q, task("x", "a"))
	dequeue(t, r, q, 1)
	if _, err := r.Maintain(t.Context(), q, lease, 100, t0, 100); err != nil {
		t.Fatal(err)
	}
	if res := deq(t, r, []string{q}, 1, lease); len(res.Tasks) != 1 || !res.Tasks[0].Redelivered {
		t.Fatalf("re-dequeue after the reap: %+v, want x re-delivered", res.Tasks)
	}
	if ok, err := r.Progress(t.Context(), q, "x", `{"p":1}`); err != nil || !ok {
		t.Fatalf("progress: %v %v", ok, err)
	}
	if n, err := r.Ack(t.Context(), q, lease, []AckItem{{ID: "x"}}); err != nil || n != 1 {
		t.Fatalf("the stale holder's ack: %d, %v", n, err)
	}
	if left := snap(t, r, q).Tasks; len(left) != 0 {
		t.Errorf("fields left after the ack: %v", left)
	}
}
