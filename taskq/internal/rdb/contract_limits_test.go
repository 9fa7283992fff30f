package rdb

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// setLimit runs limit.lua's set through SetLimit.
func setLimit(t *testing.T, r *RDB, q, tenant string, l Limit) {
	t.Helper()
	if err := r.SetLimit(t.Context(), q, tenant, l); err != nil {
		t.Fatalf("set limit %+v of %q/%q: %v", l, q, tenant, err)
	}
}

// ack acks ids at now, each deleted at once.
func ack(t *testing.T, r *RDB, q string, now time.Time, ids ...string) {
	t.Helper()
	items := make([]AckItem, len(ids))
	for i, id := range ids {
		items[i] = AckItem{ID: id}
	}
	if n, err := r.Ack(t.Context(), q, now, items); err != nil || n != len(ids) {
		t.Fatalf("ack %v: %d held, %v", ids, n, err)
	}
}

// step is one dequeue of a limits scenario and what it must give and leave.
type step struct {
	before    func(t *testing.T, r *RDB, q string) // e.g. an ack
	now       time.Time
	want      []string
	retry     time.Time
	throttled []Z
	limits    map[string]string // if set: the limits hash afterwards (buckets: "tokens at_ms")
}

// TestDequeueLimits: a tenant at its in-flight cap is parked in throttled
// at HELD until one of its tasks ends (ack's release makes it due and wakes
// a worker); a tenant out of rate tokens is parked until its next token,
// which the reply's hint names; a queue at its cap or rate is marked by
// the member "\0q" and served no further.
func TestDequeueLimits(t *testing.T) {
	const held = 1e15
	cases := []struct {
		name  string
		setup func(t *testing.T, r *RDB, q string)
		steps []step
	}{{
		name: "tenant in-flight cap",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, task("a1", "a"), task("a2", "a"), task("b1", "b"))
			setLimit(t, r, q, "a", Limit{MaxActive: 1})
		},
		steps: []step{
			{now: t0, want: []string{"a1", "b1"}, throttled: []Z{{"a", held}}},
			{now: t0, want: []string{}, throttled: []Z{{"a", held}}},
			{before: func(t *testing.T, r *RDB, q string) { ack(t, r, q, t0, "a1") }, now: t0, want: []string{"a2"}, throttled: []Z{}},
		},
	}, {
		name: "tenant rate",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, task("a1", "a"), task("a2", "a"), task("a3", "a"), task("b1", "b"))
			setLimit(t, r, q, "a", Limit{Rate: 10, Burst: 2})
		},
		steps: []step{
			{now: t0, want: []string{"a1", "b1", "a2"}, retry: at(100 * time.Millisecond), throttled: []Z{{"a", msf(at(100 * time.Millisecond))}},
				limits: map[string]string{"t:a": "10 2 0 0", "tok:t:a": "0.000000 " + ms(t0)}},
			{now: at(99 * time.Millisecond), want: []string{}, retry: at(100 * time.Millisecond), throttled: []Z{{"a", msf(at(100 * time.Millisecond))}}},
			{now: at(100 * time.Millisecond), want: []string{"a3"}, throttled: []Z{},
				limits: map[string]string{"t:a": "10 2 0 0", "tok:t:a": "0.000000 " + ms(at(100*time.Millisecond))}},
		},
	}, {
		name: "queue in-flight cap",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, task("a1", "a"), task("b1", "b"))
			setLimit(t, r, q, "", Limit{MaxActive: 1})
		},
		steps: []step{
			{now: t0, want: []string{"a1"}, throttled: []Z{{"\x00q", held}}},
			{before: func(t *testing.T, r *RDB, q string) { ack(t, r, q, t0, "a1") }, now: t0, want: []string{"b1"}, throttled: []Z{}},
		},
	}, {
		name: "queue rate",
		setup: func(t *testing.T, r *RDB, q string) {
			enqueue(t, r, q, task("a1", "a"), task("b1", "b"))
			setLimit(t, r, q, "", Limit{Rate: 5, Burst: 1})
		},
		steps: []step{
			{now: t0, want: []string{"a1"}, retry: at(200 * time.Millisecond), throttled: []Z{{"\x00q", msf(at(200 * time.Millisecond))}}},
			{now: at(200 * time.Millisecond), want: []string{"b1"}, throttled: []Z{}},
		},
	}}
	r := openTest(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := newQueue(t, r, "q")
			c.setup(t, r, q)
			for i, s := range c.steps {
				if s.before != nil {
					s.before(t, r, q)
				}
				res := deq(t, r, []string{q}, 10, s.now)
				if d := cmp.Diff(s.want, order(res)); d != "" {
					t.Errorf("step %d: order (-want +got):\n%s", i, d)
				}
				if !res.Retry.Equal(s.retry) {
					t.Errorf("step %d: retry hint %v, want %v", i, res.Retry, s.retry)
				}
				sn := snap(t, r, q)
				if d := cmp.Diff(s.throttled, sn.Throttled, cmpEmpty); d != "" {
					t.Errorf("step %d: throttled (-want +got):\n%s", i, d)
				}
				if d := cmp.Diff(s.limits, sn.Limits); s.limits != nil && d != "" {
					t.Errorf("step %d: limits (-want +got):\n%s", i, d)
				}
			}
		})
	}
}

// TestDequeueLimitedQueueLeftForTheNext: a queue at its own cap is left
// and the next queue in KEYS order is served in the same call.
func TestDequeueLimitedQueueLeftForTheNext(t *testing.T) {
	r := openTest(t)
	q1, q2 := newQueue(t, r, "1"), newQueue(t, r, "2")
	enqueue(t, r, q1, task("x", "a"), task("y", "a"))
	enqueue(t, r, q2, task("z", "a"))
	setLimit(t, r, q1, "", Limit{MaxActive: 1})
	res := deq(t, r, []string{q1, q2}, 10, t0)
	want := []got{{q1, "x", "m-x", "a"}, {q2, "z", "m-z", "a"}}
	var gotTasks []got
	for _, d := range res.Tasks {
		gotTasks = append(gotTasks, got{d.Queue, d.ID, string(d.Msg), d.Tenant})
	}
	if d := cmp.Diff(want, gotTasks); d != "" {
		t.Errorf("tasks (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]int64{q1: 1, q2: 0}, res.Pending); d != "" {
		t.Errorf("pending counts (-want +got):\n%s", d)
	}
}

// limitCall runs limit.lua with raw ARGV and returns its reply (or error).
func limitCall(args ...string) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		n, err := limitScript.Exec(t.Context(), r.c, QueueKeys(q), args).AsInt64()
		if err != nil {
			return err.Error()
		}
		return n
	}
}

// TestLimitContract: limit.lua sets (limits[q | t:<tenant>] = value),
// clears (the field and its bucket) or clears all limits of a queue; then
// every throttled tenant is given its place back (a paused one above
// PAUSED, one without pending work only leaves throttled; "\0q" goes) and
// a token wakes a worker. It returns 1 when it set or removed something.
func TestLimitContract(t *testing.T) {
	withLimits := func(t *testing.T, r *RDB, q string) {
		k := QueueKeys(q)
		raw(t, r, "HSET", k[KLimits], "q", "5 1 0 0", "tok:q", "0.5 1", "t:a", "1 1 1 0", "tok:t:a", "0.2 1", "t:b", "0 1 2 0")
	}
	throttled := func(t *testing.T, r *RDB, q string) {
		enqueue(t, r, q, task("x", "a"), task("y", "b"))
		clearWake(t, r, q)
		k := QueueKeys(q)
		raw(t, r, "ZREM", k[KTenants], "a", "b")
		raw(t, r, "HSET", k[KState], "vt", "3", "f:a", "5", "f:b", "1", "p:b", "9")
		raw(t, r, "ZADD", k[KThrottled], "1e15", "a", "100", "b", "7", "c", "1e15", "\x00q")
	}
	runContracts(t, []contract{{
		name: "set the queue's limit",
		call: limitCall("set", "", "5 1 0 0"),
		want: int64(1),
		edit: func(s *Snap, q string) { s.Limits = map[string]string{"q": "5 1 0 0"}; s.Wake = tokens(1) },
	}, {
		name:  "set a tenant's limit again, to the same value",
		setup: withLimits,
		call:  limitCall("set", "a", "1 1 1 0"),
		want:  int64(1),
		edit:  func(s *Snap, q string) { s.Wake = tokens(1) },
	}, {
		name:  "clear a tenant's limit and bucket",
		setup: withLimits,
		call:  limitCall("clear", "a", ""),
		want:  int64(1),
		edit: func(s *Snap, q string) {
			delete(s.Limits, "t:a")
			delete(s.Limits, "tok:t:a")
			s.Wake = tokens(1)
		},
	}, {
		name:  "clear the queue's own limit",
		setup: withLimits,
		call:  limitCall("clear", "", ""),
		want:  int64(1),
		edit: func(s *Snap, q string) {
			delete(s.Limits, "q")
			delete(s.Limits, "tok:q")
			s.Wake = tokens(1)
		},
	}, {
		name: "clear a limit that is not there",
		call: limitCall("clear", "a", ""),
		want: int64(0),
		edit: func(s *Snap, q string) { s.Wake = tokens(1) },
	}, {
		name:  "clear all",
		setup: withLimits,
		call:  limitCall("clearall", "", ""),
		want:  int64(1),
		edit:  func(s *Snap, q string) { s.Limits = nil; s.Wake = tokens(1) },
	}, {
		name:  "throttled tenants get their place back",
		setup: throttled,
		call:  limitCall("set", "a", "0 1 0 0"),
		want:  int64(1),
		edit: func(s *Snap, q string) {
			s.Limits = map[string]string{"t:a": "0 1 0 0"}
			s.Throttled = nil
			s.Tenants = zset(Z{"a", 5}, Z{"b", 3 + 1e15})
			s.Wake = tokens(1)
		},
	}})
}

// TestLimitRefusesAnUnknownOp: an op other than set, clear or clearall is
// an error that names it, and changes nothing (it used to clear every
// limit of the queue).
func TestLimitRefusesAnUnknownOp(t *testing.T) {
	runContracts(t, []contract{{
		name: "unknown op",
		setup: func(t *testing.T, r *RDB, q string) {
			raw(t, r, "HSET", QueueKeys(q)[KLimits], "q", "5 1 0 0")
		},
		call: limitCall("sett", "", "1 1 1 0"),
		want: `limit: op "sett": want set, clear or clearall`,
	}})
}
