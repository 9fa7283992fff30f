package rdb

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"
)

// lease is the lease every dequeue of these tests gives.
var lease = at(30 * time.Second)

// got is one dequeued task as the tests compare it.
type got struct{ Queue, ID, Msg, Tenant string }

// deq runs dequeue.lua over queues at now (through Dequeue).
func deq(t *testing.T, r *RDB, queues []string, n int, now time.Time) DequeueResult {
	t.Helper()
	res, err := r.Dequeue(t.Context(), queues, n, now, lease)
	if err != nil {
		t.Fatalf("dequeue: %v", err)
	}
	return res
}

// order is the ids of res's tasks in order.
func order(res DequeueResult) []string {
	ids := []string{}
	for _, d := range res.Tasks {
		ids = append(ids, d.ID)
	}
	return ids
}

// flat turns a script's array reply into strings (integers in decimal).
func flat(t *testing.T, res rueidis.RedisResult) []string {
	t.Helper()
	vals, err := res.ToArray()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		if n, err := v.AsInt64(); err == nil {
			out[i] = strconv.FormatInt(n, 10)
		} else {
			out[i], _ = v.ToString()
		}
	}
	return out
}

// TestDequeueReplyFormat: the reply is 7 values per task (queue index from
// 1, id, stored value (stored.go: the member's head, then the message) or
// ” when missing, retried, starts (retried + 1 + lost starts), tenant from
// the member, flags (2: a re-delivery, else 0)), then the rate hint, then each queue's pending count in KEYS
// order; queues are served in KEYS order.
func TestDequeueReplyFormat(t *testing.T) {
	r := openTest(t)
	q1, q2, q3 := newQueue(t, r, "1"), newQueue(t, r, "2"), newQueue(t, r, "3")
	enqueue(t, r, q2, task("x", "a"), task("y", "b"))
	enqueue(t, r, q3, task("z", "a"), task("w", "a"), task("v", "a"), task("u", "a"))
	raw(t, r, "HDEL", QueueKeys(q3)[KTasks], "z")
	raw(t, r, "HSET", QueueKeys(q3)[KTasks], "z|r", "2", "z|n", "-2", "w|s", "1", "v|n", "1")
	keys := append(append(QueueKeys(q1), QueueKeys(q2)...), QueueKeys(q3)...)
	res := dequeueScript.Exec(t.Context(), r.c, keys, []string{"5", ms(t0), ms(lease), "100"})
	want := []string{
		"2", "x", stored(member("a", 0, 1, "x"), "m-x"), "0", "1", "a", "0",
		"2", "y", stored(member("b", 0, 2, "y"), "m-y"), "0", "1", "b", "0",
		"3", "z", "", "2", "5", "a", "2", // lost twice, now re-delivered
		"3", "w", stored(member("a", 0, 2, "w"), "m-w"), "0", "1", "a", "0", // snoozed once: not a start
		"3", "v", stored(member("a", 0, 3, "v"), "m-v"), "0", "2", "a", "0", // lost once, counted before
		"0", "0", "0", "1",
	}
	if d := cmp.Diff(want, flat(t, res)); d != "" {
		t.Errorf("reply (-want +got):\n%s", d)
	}
}

// TestDequeueContract: what one call leaves in the queue: every task it
// returns is in active (id -> member) with a lease (no field of the task
// written), a:<t> raised; the served tenant's tag moves on by take/w (out of
// tenants with f:<t> when it has no more), vt to the last task's start tag;
// state.dup counts re-deliveries; a token is pushed when work is left and
// none waits.
func TestDequeueContract(t *testing.T) {
	mx, my, mz := member("a", 0, 1, "x"), member("a", 0, 2, "y"), member("b", 0, 3, "z")
	three := func(t *testing.T, r *RDB, q string) {
		enqueue(t, r, q, task("x", "a"), task("y", "a"), task("z", "b"))
		clearWake(t, r, q)
	}
	call := func(n int) func(t *testing.T, r *RDB, q string) any {
		return func(t *testing.T, r *RDB, q string) any {
			res := deq(t, r, []string{q}, n, t0)
			return []any{order(res), res.Retry, res.Pending[q]}
		}
	}
	runContracts(t, []contract{{
		name:  "everything: a's run, then b",
		setup: three,
		call:  call(10),
		want:  []any{[]string{"x", "z", "y"}, time.Time{}, int64(0)},
		edit: func(s *Snap, q string) {
			s.Pending, s.Tenants = nil, nil
			s.Active = map[string]string{"x": mx, "y": my, "z": mz}
			s.Lease = zset(Z{"x", msf(lease)}, Z{"y", msf(lease)}, Z{"z", msf(lease)})
			s.State["a:a"], s.State["a:b"] = "2", "1"
			s.State["vt"], s.State["f:a"], s.State["f:b"] = "1", "2", "1"
		},
	}, {
		name:  "one task: the tenant's tag moves on, a token for the rest",
		setup: three,
		call:  call(1),
		want:  []any{[]string{"x"}, time.Time{}, int64(2)},
		edit: func(s *Snap, q string) {
			s.Pending = del(s.Pending, mx)
			s.Tenants = zset(Z{"a", 1}, Z{"b", 0})
			s.Active = map[string]string{"x": mx}
			s.Lease = []Z{{"x", msf(lease)}}
			s.State["a:a"], s.State["vt"] = "1", "0"
			s.Wake = tokens(1)
		},
	}, {
		name: "a token already waits: none added",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, task("x", "a"), task("y", "a"), task("z", "b"))
		},
		call: call(1),
		want: []any{[]string{"x"}, time.Time{}, int64(2)},
		edit: func(s *Snap, q string) {
			s.Pending = del(s.Pending, mx)
			s.Tenants = zset(Z{"a", 1}, Z{"b", 0})
			s.Active = map[string]string{"x": mx}
			s.Lease = []Z{{"x", msf(lease)}}
			s.State["a:a"], s.State["vt"] = "1", "0"
		},
	}, {
		name: "a lost start (id|n negative) is a re-delivery: state.dup, once",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, task("x", "a"), task("y", "a"))
			clearWake(t, r, q)
			raw(t, r, "HSET", QueueKeys(q)[KTasks], "x|n", "-1", "y|n", "-1", "y|r", "1")
		},
		call: func(t *testing.T, r *RDB, q string) any {
			res := deq(t, r, []string{q}, 2, t0)
			var got []any
			for _, d := range res.Tasks {
				got = append(got, d.Starts, d.Retried, d.Redelivered)
			}
			return got
		},
		want: []any{2, 0, true, 3, 1, true},
		edit: func(s *Snap, q string) {
			s.Pending, s.Tenants = nil, nil
			s.Active = map[string]string{"x": mx, "y": my}
			s.Lease = zset(Z{"x", msf(lease)}, Z{"y", msf(lease)})
			s.Tasks["x|n"], s.Tasks["y|n"] = "1", "1" // counted: the next start is none
			s.State["a:a"], s.State["vt"], s.State["f:a"], s.State["dup"] = "2", "1", "2", "2"
		},
	}, {
		name: "a tenant left in tenants without pending tasks is dropped",
		setup: func(t *testing.T, r *RDB, q string) {
			raw(t, r, "ZADD", QueueKeys(q)[KTenants], "0", "gone")
		},
		call: call(1),
		want: []any{[]string{}, time.Time{}, int64(0)},
		edit: func(s *Snap, q string) { s.Tenants = nil },
	}, {
		name: "a paused queue: nothing served, nothing promoted",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, task("x", "a"))
			enqueueAt(t, r, q, at(-time.Minute), EnqMsg{ID: "y", Msg: "m-y", Tenant: "a", Due: at(-time.Second)})
			clearWake(t, r, q)
			if err := r.Pause(t.Context(), q, "", at(time.Second)); err != nil {
				t.Fatal(err)
			}
		},
		call: call(10),
		want: []any{[]string{}, time.Time{}, int64(1)},
	}, {
		name: "a queue pause that is over ends here",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, task("x", "a"))
			clearWake(t, r, q)
			if err := r.Pause(t.Context(), q, "", t0); err != nil {
				t.Fatal(err)
			}
		},
		call: call(10),
		want: []any{[]string{"x"}, time.Time{}, int64(0)},
		edit: func(s *Snap, q string) {
			delete(s.State, "pause")
			s.Pending, s.Tenants = nil, nil
			s.Active, s.Lease = map[string]string{"x": mx}, []Z{{"x", msf(lease)}}
			s.State["a:a"], s.State["vt"], s.State["f:a"] = "1", "0", "1"
		},
	}})
}

// TestDequeueOrder: tenants in weighted start-time fair order (a tenant of
// weight w advances by 1/w per task; ties to the smaller name), each
// tenant's tasks by priority then FIFO; a tenant that arrives behind a
// backlog starts at the queue's virtual time; an admin weight in the
// limits overrides the enqueues'; queues in KEYS order; due scheduled and
// retry tasks are promoted first, up to promote_limit each.
func TestDequeueOrder(t *testing.T) {
	ws := func(id, tenant string, w float64) EnqMsg { return EnqMsg{ID: id, Msg: "m", Tenant: tenant, Weight: w} }
	pr := func(id string, p int) EnqMsg { return EnqMsg{ID: id, Msg: "m", Tenant: "a", Priority: p} }
	cases := []struct {
		name  string
		setup func(t *testing.T, r *RDB, q string)
		n     int
		want  []string
	}{{
		name: "weights 1 and 2",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, ws("a1", "a", 1), ws("a2", "a", 1), ws("a3", "a", 1), ws("b1", "b", 2), ws("b2", "b", 2), ws("b3", "b", 2), ws("b4", "b", 2))
		},
		n:    6,
		want: []string{"a1", "b1", "b2", "a2", "b3", "b4"},
	}, {
		name: "priority, then FIFO",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, pr("p0", 0), pr("p9", 9), pr("q0", 0), pr("p255", 255), pr("q9", 9))
		},
		n:    5,
		want: []string{"p255", "p9", "q9", "p0", "q0"},
	}, {
		name: "a newcomer behind a backlog is served next",
		setup: func(t *testing.T, r *RDB, q string) {
			for i := range 10 {
				enqueue(t, r, q, task("a"+strconv.Itoa(i), "a"))
			}
			dequeue(t, r, q, 5)
			enqueue(t, r, q, task("b0", "b"))
		},
		n:    2,
		want: []string{"b0", "a5"},
	}, {
		name: "an admin weight overrides the enqueues'",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, ws("a1", "a", 1), ws("a2", "a", 1), ws("b1", "b", 1), ws("b2", "b", 1), ws("b3", "b", 1), ws("b4", "b", 1), ws("b5", "b", 1))
			if err := r.SetLimit(t.Context(), q, "b", Limit{Weight: 4}); err != nil {
				t.Fatal(err)
			}
		},
		n:    6,
		want: []string{"a1", "b1", "b2", "b3", "b4", "a2"},
	}, {
		name: "due scheduled and retry tasks join their tenant's order",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueueAt(t, r, q, at(-time.Minute), EnqMsg{ID: "s", Msg: "m", Tenant: "a", Due: t0}, EnqMsg{ID: "later", Msg: "m", Tenant: "a", Due: at(time.Millisecond)})
			enqueue(t, r, q, task("p", "a"))
		},
		n:    3,
		want: []string{"s", "p"},
	}}
	r := openTest(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := newQueue(t, r, "q")
			c.setup(t, r, q)
			if d := cmp.Diff(c.want, order(deq(t, r, []string{q}, c.n, t0))); d != "" {
				t.Errorf("order (-want +got):\n%s", d)
			}
		})
	}
}

// TestDequeuePromoteLimit: ARGV promote_limit caps the promotions of each
// of scheduled and retry per queue and call.
func TestDequeuePromoteLimit(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	enqueueAt(t, r, q, at(-time.Minute), EnqMsg{ID: "s1", Msg: "m", Tenant: "a", Due: t0}, EnqMsg{ID: "s2", Msg: "m", Tenant: "a", Due: t0})
	k := QueueKeys(q)
	for i, id := range []string{"r1", "r2"} {
		m := member("a", 0, 3+i, id)
		raw(t, r, "HSET", k[KTasks], id, "m", id+"|m", m)
		raw(t, r, "ZADD", k[KRetry], ms(at(-time.Second)), m)
	}
	got := flat(t, dequeueScript.Exec(t.Context(), r.c, k, []string{"10", ms(t0), ms(lease), "1"}))
	want := []string{"1", "s1", stored(member("a", 0, 1, "s1"), "m"), "0", "1", "a", "0",
		"1", "r1", "m", "0", "1", "a", "0", // an earlier release's (id|m)
		"0", "0"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("reply (-want +got):\n%s", d)
	}
	s := snap(t, r, q)
	if len(s.Scheduled) != 1 || len(s.Retry) != 1 {
		t.Errorf("scheduled %v, retry %v: want one left in each", s.Scheduled, s.Retry)
	}
}

// TestDequeuePausedTenant: a paused tenant's tasks stay while the others
// are served; once its pause is over, the dequeue resumes it (p:<t> gone,
// its tag back below PAUSED) and serves it.
func TestDequeuePausedTenant(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	enqueue(t, r, q, task("x", "a"), task("z", "b"))
	if err := r.Pause(t.Context(), q, "a", at(time.Second)); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"z"}, order(deq(t, r, []string{q}, 10, t0))); d != "" {
		t.Errorf("while a is paused (-want +got):\n%s", d)
	}
	s := snap(t, r, q)
	if d := cmp.Diff([]Z{{"a", 1e15}}, s.Tenants); d != "" || s.State["p:a"] != ms(at(time.Second)) {
		t.Errorf("paused tenant: tenants (-want +got):\n%s p:a = %q", d, s.State["p:a"])
	}
	if d := cmp.Diff([]string{"x"}, order(deq(t, r, []string{q}, 10, at(time.Second)))); d != "" {
		t.Errorf("once the pause is over (-want +got):\n%s", d)
	}
	if s := snap(t, r, q); s.State["p:a"] != "" || len(s.Tenants) != 0 {
		t.Errorf("after the pause: p:a = %q, tenants %v; want both gone", s.State["p:a"], s.Tenants)
	}
}
