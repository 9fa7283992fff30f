package rdb

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// maintainCall runs maintain.lua (through Maintain) at now with limit,
// dead tasks older than deadBefore or beyond deadMax trimmed.
func maintainCall(now time.Time, limit int, deadBefore time.Time, deadMax int) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		res, err := r.Maintain(t.Context(), q, now, limit, deadBefore, deadMax)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
}

// dead makes ids of tenant a (enqueued, run and failed for good at the
// times given, in order) dead.
func dead(t *testing.T, r *RDB, q string, ids []string, times []time.Time) {
	t.Helper()
	for i, id := range ids {
		enqueue(t, r, q, task(id, "a"))
		dequeue(t, r, q, 1)
		if n, err := r.Fail(t.Context(), q, id, times[i], "boom", time.Time{}, "no more"); err != nil || n != FailDead {
			t.Fatalf("fail %s: %d, %v", id, n, err)
		}
	}
	clearWake(t, r, q)
}

// TestMaintainContract: maintain.lua reaps the leases expired at or before
// now (the task back in pending in its old place, its start counted as
// lost: id|n -(lost+1), state.reaped), promotes due scheduled and retry tasks unless the queue
// is paused, ends pauses that are over, trims expired completed records,
// dead tasks past retention or beyond dead_max, cancelled tasks past
// retention and unique keys whose hold ended; at most limit of each;
// returns {reaped, promoted, trimmed}; a token when it made work runnable.
func TestMaintainContract(t *testing.T) {
	far := at(-time.Hour)
	runContracts(t, []contract{{
		name:  "leases expired at now are reaped",
		setup: running,
		call:  maintainCall(lease, 100, far, 100),
		want:  MaintainResult{3, 0, 0},
		edit: func(s *Snap, q string) {
			s.Active, s.Lease = nil, nil
			s.Pending = zset(Z{rx, 0}, Z{ry, 0}, Z{rz, 0})
			s.Tasks["x|n"], s.Tasks["y|n"], s.Tasks["z|n"] = "-1", "-1", "-1" // a lost start each, not yet re-delivered
			s.Tenants = zset(Z{"a", 2}, Z{"b", 1})                            // max(vt 1, f:a 2), max(vt 1, f:b 1)
			s.State["a:a"], s.State["a:b"], s.State["reaped"] = "0", "0", "3"
			s.Wake = tokens(1)
		},
	}, {
		name:  "leases not yet expired stay; limit caps the reaping",
		setup: running,
		call:  maintainCall(lease, 2, far, 100),
		want:  MaintainResult{2, 0, 0},
		edit: func(s *Snap, q string) {
			s.Active = map[string]string{"z": rz}
			s.Lease = []Z{{"z", msf(lease)}}
			s.Pending = zset(Z{rx, 0}, Z{ry, 0})
			s.Tasks["x|n"], s.Tasks["y|n"] = "-1", "-1"
			s.Tenants = []Z{{"a", 2}}
			s.State["a:a"], s.State["reaped"] = "0", "2"
			s.Wake = tokens(1)
		},
	}, {
		name: "a lease without an active entry is dropped, not counted",
		setup: func(t *testing.T, r *RDB, q string) {
			raw(t, r, "ZADD", QueueKeys(q)[KLease], ms(t0), "ghost")
		},
		call: maintainCall(t0, 100, far, 100),
		want: MaintainResult{0, 0, 0},
		edit: func(s *Snap, q string) { s.Lease = nil },
	}, {
		name:  "before expiry nothing is reaped",
		setup: running,
		call:  maintainCall(lease.Add(-time.Millisecond), 100, far, 100),
		want:  MaintainResult{0, 0, 0},
	}, {
		name: "due scheduled and retry tasks are promoted, limit each",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueueAt(t, r, q, at(-time.Minute),
				EnqMsg{ID: "s1", Msg: "m", Tenant: "a", Due: t0}, EnqMsg{ID: "s2", Msg: "m", Tenant: "a", Due: t0},
				EnqMsg{ID: "s3", Msg: "m", Tenant: "a", Due: at(time.Second)})
			raw(t, r, "ZADD", QueueKeys(q)[KRetry], ms(t0), member("b", 0, 9, "r1"))
		},
		call: maintainCall(t0, 1, far, 100),
		want: MaintainResult{0, 2, 0},
		edit: func(s *Snap, q string) {
			s1, r1 := member("a", 0, 1, "s1"), member("b", 0, 9, "r1")
			s.Scheduled, s.Retry = del(s.Scheduled, s1), nil
			s.Pending = zset(Z{s1, 0}, Z{r1, 0})
			s.Tenants = zset(Z{"a", 0}, Z{"b", 0})
			s.Wake = tokens(1)
		},
	}, {
		name: "a paused queue promotes nothing",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueueAt(t, r, q, at(-time.Minute), EnqMsg{ID: "s1", Msg: "m", Tenant: "a", Due: t0})
			raw(t, r, "HSET", QueueKeys(q)[KState], "pause", ms(at(time.Second)))
		},
		call: maintainCall(t0, 100, far, 100),
		want: MaintainResult{0, 0, 0},
	}, {
		name: "pauses that are over end, then due tasks are promoted",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueueAt(t, r, q, at(-time.Minute), EnqMsg{ID: "s1", Msg: "m", Tenant: "a", Due: t0})
			enqueue(t, r, q, task("x", "b"), task("y", "c"))
			clearWake(t, r, q)
			k := QueueKeys(q)
			raw(t, r, "HSET", k[KState], "pause", ms(t0), "p:b", ms(t0), "p:c", ms(at(time.Second)), "vt", "4")
			raw(t, r, "ZADD", k[KTenants], "1000000000000001", "b", "1000000000000002", "c")
		},
		call: maintainCall(t0, 100, far, 100),
		want: MaintainResult{0, 1, 0},
		edit: func(s *Snap, q string) {
			delete(s.State, "pause")
			delete(s.State, "p:b")
			s1 := member("a", 0, 1, "s1")
			s.Scheduled = nil
			s.Pending = put(s.Pending, s1, 0)
			s.Tenants = zset(Z{"a", 4}, Z{"b", 4}, Z{"c", 1e15 + 2})
			s.Wake = tokens(2)
		},
	}, {
		name: "retention: completed, dead, cancelled and unique keys",
		setup: func(t *testing.T, r *RDB, q string) {
			dead(t, r, q, []string{"d1", "d2", "d3", "d4"}, []time.Time{at(-2 * time.Hour), at(-time.Minute), at(-time.Second), t0})
			k := QueueKeys(q)
			raw(t, r, "HSET", k[KTasks], "c1", "m", "c1|p", "p", "c2", "m", "x1", "m", "x1|c", "me", "x2", "m")
			raw(t, r, "HSET", k[KResults], "c1", "r", "c2", "r")
			raw(t, r, "ZADD", k[KCompleted], ms(t0), "c1", ms(at(time.Millisecond)), "c2")
			raw(t, r, "ZADD", k[KCancelled], ms(at(-2*time.Hour)), "x1", ms(at(-time.Minute)), "x2")
			raw(t, r, "HSET", k[KUniq], "u1", "c1", "u2", "c2")
			raw(t, r, "ZADD", k[KUniqExp], ms(t0), "u1", ms(at(time.Millisecond)), "u2")
		},
		call: maintainCall(t0, 100, far, 2),
		want: MaintainResult{0, 0, 4}, // c1; d1 (old), d2 (beyond 2); x1
		edit: func(s *Snap, q string) {
			for _, id := range []string{"c1", "d1", "d2", "x1"} {
				forgot(s, id)
			}
			s.Completed = []Z{{"c2", msf(at(time.Millisecond))}}
			s.Dead = zset(Z{"d3", msf(at(-time.Second))}, Z{"d4", msf(t0)})
			s.Cancelled = []Z{{"x2", msf(at(-time.Minute))}}
			s.Uniq, s.UniqExp = map[string]string{"u2": "c2"}, []Z{{"u2", msf(at(time.Millisecond))}}
		},
	}, {
		name: "retention: limit caps each kind",
		setup: func(t *testing.T, r *RDB, q string) {
			dead(t, r, q, []string{"d1", "d2", "d3"}, []time.Time{at(-3 * time.Hour), at(-2 * time.Hour), t0})
		},
		call: maintainCall(t0, 1, far, 1),
		want: MaintainResult{0, 0, 1},
		edit: func(s *Snap, q string) {
			forgot(s, "d1")
			s.Dead = del(s.Dead, "d1")
		},
	}})
}

// dlqCall runs dlq.lua with op and ids (raw ARGV) and returns its reply or
// error text.
func dlqCall(op string, ids ...string) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		n, err := dlqScript.Exec(t.Context(), r.c, QueueKeys(q), append([]string{op}, ids...)).AsInt64()
		if err != nil {
			return err.Error()
		}
		return n
	}
}

// TestDLQContract: dlq.lua requeues dead tasks (pending again under their
// member, retried, starts, last error, reason and progress gone, a token)
// or deletes them (no field left); no ids means all; ids that are not dead
// are not counted.
func TestDLQContract(t *testing.T) {
	twoDead := func(t *testing.T, r *RDB, q string) {
		dead(t, r, q, []string{"d1", "d2"}, []time.Time{t0, t0})
		raw(t, r, "HSET", QueueKeys(q)[KTasks], "d1|r", "3", "d1|p", "50%", "d1|s", "2")
	}
	requeued := func(s *Snap, ids ...string) {
		for _, id := range ids {
			for _, f := range []string{"|r", "|n", "|e", "|d", "|p", "|s"} {
				delete(s.Tasks, id+f)
			}
			s.Dead = del(s.Dead, id)
			s.Pending = put(s.Pending, s.Tasks[id+"|m"], 0)
		}
		s.Tenants = []Z{{"a", 2}} // max(vt 1, f:a 2)
		s.Wake = tokens(1)
	}
	runContracts(t, []contract{{
		name:  "requeue all",
		setup: twoDead,
		call:  dlqCall("requeue"),
		want:  int64(2),
		edit:  func(s *Snap, q string) { requeued(s, "d1", "d2") },
	}, {
		name:  "requeue some; ids not dead are not counted",
		setup: twoDead,
		call:  dlqCall("requeue", "d2", "gone"),
		want:  int64(1),
		edit:  func(s *Snap, q string) { requeued(s, "d2") },
	}, {
		name:  "delete all",
		setup: twoDead,
		call:  dlqCall("delete"),
		want:  int64(2),
		edit: func(s *Snap, q string) {
			forgot(s, "d1")
			forgot(s, "d2")
			s.Dead = nil
		},
	}, {
		name:  "nothing dead: no token",
		setup: running,
		call:  dlqCall("requeue", "x"),
		want:  int64(0),
	}, {
		// A dead task without a recorded member (from a release before
		// members were recorded) cannot be put back in its tenant's order:
		// requeue leaves it dead (delete can remove it), where it used to
		// delete it and count it as requeued.
		name: "requeue of a dead task without a member leaves it",
		setup: func(t *testing.T, r *RDB, q string) {
			twoDead(t, r, q)
			legacy(t, r, q, "d1", false)
		},
		call: dlqCall("requeue"),
		want: int64(1),
		edit: func(s *Snap, q string) { requeued(s, "d2") },
	}, {
		name:  "an unknown op is refused",
		setup: twoDead,
		call:  dlqCall("requeu"),
		want:  `dlq: op "requeu": want requeue or delete`,
	}})
}

// TestMaintainReapedStartIsADuplicate: the header's at-least-once promise:
// a reaped task runs again and its next start is counted as a duplicate,
// once: a later start after a failure is an attempt.
func TestMaintainReapedStartIsADuplicate(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	running(t, r, q)
	if _, err := r.Maintain(t.Context(), q, lease, 100, t0, 100); err != nil {
		t.Fatal(err)
	}
	res := deq(t, r, []string{q}, 3, lease)
	var starts []int
	for _, d := range res.Tasks {
		starts = append(starts, d.Starts)
	}
	if d := cmp.Diff([]int{2, 2, 2}, starts); d != "" {
		t.Errorf("starts of the reaped tasks (-want +got):\n%s", d)
	}
	if s := snap(t, r, q); s.State["dup"] != "3" {
		t.Errorf("state.dup = %q, want 3", s.State["dup"])
	}
	// x fails and is retried: that start is an attempt, not a re-delivery;
	// its starts count both (1 failed + 1 lost + this one).
	if n, err := r.Fail(t.Context(), q, "x", lease, "boom", lease, ""); err != nil || n != FailRetried {
		t.Fatalf("fail: %d, %v", n, err)
	}
	res = deq(t, r, []string{q}, 3, lease.Add(time.Second))
	if len(res.Tasks) != 1 || res.Tasks[0].Starts != 3 || res.Tasks[0].Redelivered || res.Tasks[0].Retried != 1 {
		t.Fatalf("the retry's dequeue: %+v; want x, starts 3, retried 1, no re-delivery", res.Tasks)
	}
	if s := snap(t, r, q); s.State["dup"] != "3" {
		t.Errorf("state.dup = %q after a retry, want still 3", s.State["dup"])
	}
}
