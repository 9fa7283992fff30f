package rdb

import (
	"testing"
	"time"
)

// pauseCall runs pause.lua with raw ARGV and returns its reply or error text.
func pauseCall(args ...string) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		n, err := pauseScript.Exec(t.Context(), r.c, QueueKeys(q), args).AsInt64()
		if err != nil {
			return err.Error()
		}
		return n
	}
}

// TestPauseContract: pause.lua records a queue's pause (state.pause) or a
// tenant's (p:<t>, its tag raised by PAUSED once); resume removes it (a
// tenant's tag back to max(vt, f:<t>)) and pushes a token; pause pushes
// none.
func TestPauseContract(t *testing.T) {
	until := ms(at(time.Minute))
	tenants := func(t *testing.T, r *RDB, q string) {
		enqueue(t, r, q, task("x", "a"), task("y", "b"))
		clearWake(t, r, q)
		raw(t, r, "HSET", QueueKeys(q)[KState], "vt", "2", "f:a", "3")
		raw(t, r, "ZADD", QueueKeys(q)[KTenants], "4", "a")
	}
	pausedA := func(t *testing.T, r *RDB, q string) {
		tenants(t, r, q)
		raw(t, r, "HSET", QueueKeys(q)[KState], "p:a", until)
		raw(t, r, "ZADD", QueueKeys(q)[KTenants], "1000000000000004", "a")
	}
	runContracts(t, []contract{{
		name: "pause the queue",
		call: pauseCall("pause", "", until),
		want: int64(1),
		edit: func(s *Snap, q string) { s.State = map[string]string{"pause": until} },
	}, {
		name: "resume the queue",
		setup: func(t *testing.T, r *RDB, q string) {
			raw(t, r, "HSET", QueueKeys(q)[KState], "pause", until)
		},
		call: pauseCall("resume", "", "0"),
		want: int64(1),
		edit: func(s *Snap, q string) { s.State = nil; s.Wake = tokens(1) },
	}, {
		name:  "pause a tenant with a tag",
		setup: tenants,
		call:  pauseCall("pause", "a", until),
		want:  int64(1),
		edit: func(s *Snap, q string) {
			s.State["p:a"] = until
			s.Tenants = put(s.Tenants, "a", 4+1e15)
		},
	}, {
		name:  "pause a paused tenant: new end, the tag raised once",
		setup: pausedA,
		call:  pauseCall("pause", "a", ms(at(time.Hour))),
		want:  int64(1),
		edit:  func(s *Snap, q string) { s.State["p:a"] = ms(at(time.Hour)) },
	}, {
		name:  "pause a tenant without backlog: recorded for when it has some",
		setup: tenants,
		call:  pauseCall("pause", "c", until),
		want:  int64(1),
		edit:  func(s *Snap, q string) { s.State["p:c"] = until },
	}, {
		name:  "resume a tenant: a newly active tenant's tag",
		setup: pausedA,
		call:  pauseCall("resume", "a", "0"),
		want:  int64(1),
		edit: func(s *Snap, q string) {
			delete(s.State, "p:a")
			s.Tenants = put(s.Tenants, "a", 3) // max(vt 2, f:a 3)
			s.Wake = tokens(1)
		},
	}, {
		name:  "resume a tenant that is not paused: a token only",
		setup: tenants,
		call:  pauseCall("resume", "a", "0"),
		want:  int64(1),
		edit:  func(s *Snap, q string) { s.Wake = tokens(1) },
	}, {
		name:  "an unknown op is refused",
		setup: tenants,
		call:  pauseCall("stop", "a", until),
		want:  `pause: op "stop": want pause or resume`,
	}})
}

// cancelCall runs cancel.lua (through Cancel) at t0 by "ops".
func cancelCall(id string) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		state, err := r.Cancel(t.Context(), q, id, "ops", t0)
		if err != nil {
			t.Fatal(err)
		}
		return state
	}
}

// everyState leaves one task in each state: p pending, s scheduled, rt
// retry (tenant a), x, y, z active (running), d dead, c completed, k
// cancelled.
func everyState(t *testing.T, r *RDB, q string) {
	t.Helper()
	running(t, r, q)
	ctx := t.Context()
	enqueue(t, r, q, task("d", "a"), task("c", "a"), task("rt", "a"), task("k", "a"))
	dequeue(t, r, q, 4)
	if _, err := r.Fail(ctx, q, "d", t0, "boom", time.Time{}, "why"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Fail(ctx, q, "rt", t0, "boom", at(time.Minute), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Ack(ctx, q, t0, []AckItem{{ID: "c", KeepUntil: at(time.Hour), Result: []byte("res")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Cancel(ctx, q, "k", "earlier", at(-time.Second)); err != nil {
		t.Fatal(err)
	}
	enqueue(t, r, q, task("p", "a"), EnqMsg{ID: "s", Msg: "m-s", Tenant: "a", Due: at(time.Minute)})
	clearWake(t, r, q)
}

// Members of the tasks everyState leaves waiting.
var (
	mrt, mp, ms9 = member("a", 0, 6, "rt"), member("a", 0, 8, "p"), member("a", 0, 9, "s")
)

// TestCancelContract: cancel.lua takes a pending, scheduled, retry or
// active task out of every place a worker takes work from, records who
// and when (id|c) and its member, adds it to cancelled (id -> now), counts
// state.cancelled and returns the state it had; an active one loses its
// lease (a:<t> down) and its run counts in id|n; dead, completed, cancelled and unknown tasks are
// left as they are.
func TestCancelContract(t *testing.T) {
	cancelled := func(s *Snap, id, m string) {
		s.Tasks[id+"|c"], s.Tasks[id+"|m"] = "ops\x00"+ms(t0), m
		s.Cancelled = put(s.Cancelled, id, msf(t0))
		s.State["cancelled"] = itoa(atoi(s.State["cancelled"]) + 1)
	}
	cases := []contract{
		{name: "pending", call: cancelCall("p"), want: "pending",
			edit: func(s *Snap, q string) { s.Pending = del(s.Pending, mp); cancelled(s, "p", mp) }},
		{name: "scheduled", call: cancelCall("s"), want: "scheduled",
			edit: func(s *Snap, q string) { s.Scheduled = del(s.Scheduled, ms9); cancelled(s, "s", ms9) }},
		{name: "retry", call: cancelCall("rt"), want: "retry",
			edit: func(s *Snap, q string) { s.Retry = del(s.Retry, mrt); cancelled(s, "rt", mrt) }},
		{name: "active", call: cancelCall("x"), want: "active",
			edit: func(s *Snap, q string) {
				finished(s, "x", rx)
				cancelled(s, "x", rx)
				s.Tasks["x|n"] = "1" // its run, cut short, counts among the starts without an outcome
			}},
		{name: "dead", call: cancelCall("d"), want: "dead"},
		{name: "completed", call: cancelCall("c"), want: "completed"},
		{name: "cancelled", call: cancelCall("k"), want: "cancelled"},
		{name: "unknown", call: cancelCall("nope"), want: "unknown"},
		{name: "pending, member found by the caller's scan",
			setup: func(t *testing.T, r *RDB, q string) { legacy(t, r, q, "p", false) },
			call:  cancelCall("p"), want: "pending",
			edit: func(s *Snap, q string) { s.Pending = del(s.Pending, mp); cancelled(s, "p", mp) }},
	}
	for i := range cases {
		setup := cases[i].setup
		cases[i].setup = func(t *testing.T, r *RDB, q string) {
			everyState(t, r, q)
			if setup != nil {
				setup(t, r, q)
			}
		}
	}
	runContracts(t, cases)
}

// TestCancelActive: cancelling a running task publishes "queue \0 id" on
// the channel, and the holder then finds its task gone: its heartbeat
// reports the lease lost, its ack and its failure count as late.
func TestCancelActive(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	running(t, r, q)
	got := make(chan string, 16)
	ctx := t.Context()
	go func() {
		_ = r.SubscribeCancels(ctx, func(queue, id string) {
			if queue == q {
				select {
				case got <- id:
				default: // a probe too many: the test reads the first only
				}
			}
		})
	}()
	// poll: publish probes until the subscription sees one.
	deadline := time.After(5 * time.Second)
wait:
	for {
		raw(t, r, "PUBLISH", CancelChannel, q+"\x00probe")
		select {
		case <-got:
			break wait
		case <-deadline:
			t.Fatal("the cancel subscription saw no probe in 5 s")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if state, err := r.Cancel(ctx, q, "x", "ops", t0); err != nil || state != "active" {
		t.Fatalf("cancel x: %q, %v; want active", state, err)
	}
	for x := false; !x; {
		select {
		case id := <-got:
			if x = id == "x"; !x && id != "probe" {
				t.Fatalf("published %q, want x", id)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("cancel published nothing for x in 5 s")
		}
	}
	lost, err := r.Extend(ctx, q, at(time.Minute), []Lease{{ID: "x"}})
	if err != nil || len(lost) != 1 {
		t.Errorf("heartbeat after cancel: lost %v, %v; want [x]", lost, err)
	}
	n, err := r.Ack(ctx, q, t0, []AckItem{{ID: "x"}})
	f, ferr := r.Fail(ctx, q, "x", t0, "e", at(time.Minute), "")
	if err != nil || ferr != nil || n != 0 || f != FailLost {
		t.Errorf("ack after cancel: %d, %v; fail: %d, %v; want 0 and FailLost", n, err, f, ferr)
	}
	if s := snap(t, r, q); s.State["late"] != "2" || len(s.Retry) != 0 {
		t.Errorf("state.late %q, retry %v; want 2 and nothing retried", s.State["late"], s.Retry)
	}
}

// taskopCall runs taskop.lua with raw ARGV and returns "state acted" or the
// error text.
func taskopCall(args ...string) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		v, err := taskopScript.Exec(t.Context(), r.c, QueueKeys(q), args).ToArray()
		if err != nil {
			return err.Error()
		}
		state, _ := v[0].ToString()
		acted, _ := v[1].AsInt64()
		return state + " " + itoa(int(acted))
	}
}

// TestTaskOpContract: taskop.lua deletes a task that is not active from
// wherever it waits (no field left, nor its result), or runs a scheduled,
// retry, dead or cancelled task now (pending under its member, a token;
// dead and cancelled ones start over: retried, starts, error, reason,
// cancel record and progress gone); it returns the state before and
// whether it acted; other states are left as they are.
func TestTaskOpContract(t *testing.T) {
	deleted := func(id, m string) func(s *Snap, q string) {
		return func(s *Snap, q string) {
			forgot(s, id)
			for _, p := range []*[]Z{&s.Pending, &s.Scheduled, &s.Retry} {
				*p = del(*p, m)
			}
			for _, p := range []*[]Z{&s.Dead, &s.Completed, &s.Cancelled} {
				*p = del(*p, id)
			}
		}
	}
	ran := func(id, key string, fresh bool) func(s *Snap, q string) {
		return func(s *Snap, q string) {
			m := s.Tasks[id+"|m"]
			set := map[string]*[]Z{"scheduled": &s.Scheduled, "retry": &s.Retry, "dead": &s.Dead, "cancelled": &s.Cancelled}[key]
			*set = del(del(*set, m), id)
			if fresh {
				for _, f := range []string{"|r", "|n", "|e", "|d", "|c", "|p", "|s"} {
					delete(s.Tasks, id+f)
				}
			}
			s.Pending = put(s.Pending, m, 0)
			s.Wake = tokens(1)
		}
	}
	md, mc, mk := member("a", 0, 4, "d"), member("a", 0, 5, "c"), member("a", 0, 7, "k")
	cases := []contract{
		{name: "delete pending", call: taskopCall("delete", "p", ""), want: "pending 1", edit: deleted("p", mp)},
		{name: "delete scheduled", call: taskopCall("delete", "s", ""), want: "scheduled 1", edit: deleted("s", ms9)},
		{name: "delete retry", call: taskopCall("delete", "rt", ""), want: "retry 1", edit: deleted("rt", mrt)},
		{name: "delete dead", call: taskopCall("delete", "d", ""), want: "dead 1", edit: deleted("d", md)},
		{name: "delete completed and its result", call: taskopCall("delete", "c", ""), want: "completed 1", edit: deleted("c", mc)},
		{name: "delete cancelled", call: taskopCall("delete", "k", ""), want: "cancelled 1", edit: deleted("k", mk)},
		{name: "delete active: refused", call: taskopCall("delete", "x", ""), want: "active 0"},
		{name: "delete unknown", call: taskopCall("delete", "nope", ""), want: "unknown 0"},
		{name: "delete pending by the caller's member", call: taskopCall("delete", "p", mp), want: "pending 1", edit: deleted("p", mp),
			setup: func(t *testing.T, r *RDB, q string) { legacy(t, r, q, "p", false) }},
		{name: "run scheduled", call: taskopCall("run", "s", ""), want: "scheduled 1", edit: ran("s", "scheduled", false)},
		{name: "run retry: its retries kept", call: taskopCall("run", "rt", ""), want: "retry 1", edit: ran("rt", "retry", false)},
		{name: "run dead: starts over", call: taskopCall("run", "d", ""), want: "dead 1", edit: ran("d", "dead", true)},
		{name: "run cancelled: starts over", call: taskopCall("run", "k", ""), want: "cancelled 1", edit: ran("k", "cancelled", true)},
		{name: "run pending: left", call: taskopCall("run", "p", ""), want: "pending 0"},
		{name: "run completed: left", call: taskopCall("run", "c", ""), want: "completed 0"},
		{name: "run active: left", call: taskopCall("run", "x", ""), want: "active 0"},
		{name: "run dead without a member: left", call: taskopCall("run", "d", ""), want: "dead 0",
			setup: func(t *testing.T, r *RDB, q string) { legacy(t, r, q, "d", false) }},
		{name: "an unknown op is refused", call: taskopCall("rerun", "d", ""), want: `taskop: op "rerun": want delete or run`},
	}
	for i := range cases {
		setup := cases[i].setup
		cases[i].setup = func(t *testing.T, r *RDB, q string) {
			everyState(t, r, q)
			raw(t, r, "HSET", QueueKeys(q)[KTasks], "d|p", "1/2", "k|p", "1/3")
			if setup != nil {
				setup(t, r, q)
			}
		}
	}
	runContracts(t, cases)
}
