package rdb

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// enqueueCall runs enqueue.lua (through Enqueue) at t0.
func enqueueCall(msgs ...EnqMsg) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		n, err := r.Enqueue(t.Context(), q, t0, msgs)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// TestEnqueueContract: enqueue.lua adds each task (message, member) as
// pending, or scheduled when due later than now, skips ids that exist,
// counts state.enqueued, gives a tenant without backlog its start tag
// max(vt, f:<t>) (raised by PAUSED if the tenant is paused, none while it
// is throttled), sets w:<t> (1 by default, kept when weight is 0), and
// pushes one wake-up token per call that made a task pending.
func TestEnqueueContract(t *testing.T) {
	mx, my, mz := member("a", 0, 1, "x"), member("a", 5, 2, "y"), member("b", 0, 3, "z")
	runContracts(t, []contract{{
		name: "one pending task",
		call: enqueueCall(task("x", "a")),
		want: 1,
		edit: func(s *Snap, q string) {
			s.Tasks = map[string]string{"x": "m-x", "x|m": mx}
			s.Pending = []Z{{mx, 0}}
			s.Tenants = []Z{{"a", 0}}
			s.State = map[string]string{"seq": "1", "w:a": "1", "enqueued": "1"}
			s.Wake = tokens(1)
		},
	}, {
		name: "a batch: FIFO seq, priority in the member, one token",
		call: enqueueCall(task("x", "a"), EnqMsg{ID: "y", Msg: "m-y", Tenant: "a", Priority: 5, Weight: 2}, task("z", "b")),
		want: 3,
		edit: func(s *Snap, q string) {
			s.Tasks = map[string]string{"x": "m-x", "x|m": mx, "y": "m-y", "y|m": my, "z": "m-z", "z|m": mz}
			s.Pending = zset(Z{mx, 0}, Z{my, 0}, Z{mz, 0})
			s.Tenants = zset(Z{"a", 0}, Z{"b", 0})
			s.State = map[string]string{"seq": "3", "w:a": "2", "w:b": "1", "enqueued": "3"}
			s.Wake = tokens(1)
		},
	}, {
		name: "due later than now: scheduled, no token",
		call: enqueueCall(EnqMsg{ID: "x", Msg: "m-x", Tenant: "a", Due: at(time.Minute)}),
		want: 1,
		edit: func(s *Snap, q string) {
			s.Tasks = map[string]string{"x": "m-x", "x|m": mx}
			s.Scheduled = []Z{{mx, msf(at(time.Minute))}}
			s.State = map[string]string{"seq": "1", "w:a": "1", "enqueued": "1"}
		},
	}, {
		name: "due at now: pending",
		call: enqueueCall(EnqMsg{ID: "x", Msg: "m-x", Tenant: "a", Due: t0}),
		want: 1,
		edit: func(s *Snap, q string) {
			s.Tasks = map[string]string{"x": "m-x", "x|m": mx}
			s.Pending = []Z{{mx, 0}}
			s.Tenants = []Z{{"a", 0}}
			s.State = map[string]string{"seq": "1", "w:a": "1", "enqueued": "1"}
			s.Wake = tokens(1)
		},
	}, {
		name:  "an id that exists is skipped, the others added",
		setup: func(t *testing.T, r *RDB, q string) { enqueue(t, r, q, task("x", "a")); clearWake(t, r, q) },
		call:  enqueueCall(EnqMsg{ID: "x", Msg: "other", Tenant: "b"}, EnqMsg{ID: "y", Msg: "m-y", Tenant: "a"}),
		want:  1,
		edit: func(s *Snap, q string) {
			y := member("a", 0, 2, "y")
			s.Tasks["y"], s.Tasks["y|m"] = "m-y", y
			s.Pending = put(s.Pending, y, 0)
			s.State["seq"], s.State["enqueued"] = "2", "2"
			s.Wake = tokens(1)
		},
	}, {
		name:  "only duplicates: nothing changes, no token",
		setup: func(t *testing.T, r *RDB, q string) { enqueue(t, r, q, task("x", "a")); clearWake(t, r, q) },
		call:  enqueueCall(task("x", "a")),
		want:  0,
	}, {
		name: "weight 0 keeps the tenant's weight, a weight replaces it",
		setup: func(t *testing.T, r *RDB, q string) {
			raw(t, r, "HSET", QueueKeys(q)[KState], "w:a", "3", "w:b", "3")
		},
		call: enqueueCall(task("x", "a"), EnqMsg{ID: "z", Msg: "m-z", Tenant: "b", Weight: 0.5}),
		want: 2,
		edit: func(s *Snap, q string) {
			z := member("b", 0, 2, "z")
			s.Tasks = map[string]string{"x": "m-x", "x|m": mx, "z": "m-z", "z|m": z}
			s.Pending = zset(Z{mx, 0}, Z{z, 0})
			s.Tenants = zset(Z{"a", 0}, Z{"b", 0})
			s.State = map[string]string{"seq": "2", "w:a": "3", "w:b": "0.5", "enqueued": "2"}
			s.Wake = tokens(1)
		},
	}, {
		name: "start tags: max(vt, f:<t>), raised by PAUSED when paused, none when throttled or backlogged",
		setup: func(t *testing.T, r *RDB, q string) {
			k := QueueKeys(q)
			raw(t, r, "HSET", k[KState], "vt", "5", "f:a", "7", "f:b", "2", "p:c", "999", "f:d", "9")
			raw(t, r, "ZADD", k[KThrottled], "100", "d")
			raw(t, r, "ZADD", k[KTenants], "4", "e")
		},
		call: enqueueCall(task("x", "a"), task("y", "b"), task("w", "c"), task("v", "d"), task("u", "e")),
		want: 5,
		edit: func(s *Snap, q string) {
			ms := []string{member("a", 0, 1, "x"), member("b", 0, 2, "y"), member("c", 0, 3, "w"), member("d", 0, 4, "v"), member("e", 0, 5, "u")}
			for i, id := range []string{"x", "y", "w", "v", "u"} {
				s.Tasks[id], s.Tasks[id+"|m"] = "m-"+id, ms[i]
				s.Pending = put(s.Pending, ms[i], 0)
				s.State["w:"+ms[i][:1]] = "1"
			}
			s.Tenants = zset(Z{"a", 7}, Z{"b", 5}, Z{"c", 5 + 1e15}, Z{"e", 4})
			s.State["seq"], s.State["enqueued"] = "5", "5"
			s.Wake = tokens(1)
		},
	}, {
		name:  "the wake list stays at 64 tokens",
		setup: func(t *testing.T, r *RDB, q string) { raw(t, r, "RPUSH", QueueKeys(q)[KWake], tokens(64)...) },
		call:  enqueueCall(task("x", "a")),
		want:  1,
		edit: func(s *Snap, q string) {
			s.Tasks = map[string]string{"x": "m-x", "x|m": mx}
			s.Pending = []Z{{mx, 0}}
			s.Tenants = []Z{{"a", 0}}
			s.State = map[string]string{"seq": "1", "w:a": "1", "enqueued": "1"}
		},
	}})
}

// uniqueReply is what EnqueueUnique returns.
type uniqueReply struct {
	Added            bool
	Holder, Replaced string
}

// uniqueCall runs unique.lua (through EnqueueUnique) at t0.
func uniqueCall(mode, key string, hold time.Time, m EnqMsg) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		added, holder, replaced, err := r.EnqueueUnique(t.Context(), q, t0, mode, key, hold, m)
		if err != nil {
			t.Fatal(err)
		}
		return uniqueReply{added, holder, replaced}
	}
}

// holding enqueues task m holding key until hold (mode unique, at t0).
func holding(t *testing.T, r *RDB, q, mode, key string, hold time.Time, m EnqMsg) {
	t.Helper()
	added, _, _, err := r.EnqueueUnique(t.Context(), q, t0, mode, key, hold, m)
	if err != nil || !added {
		t.Fatalf("enqueue %s holding %q: added %v, %v", m.ID, key, added, err)
	}
	clearWake(t, r, q)
}

// TestUniqueContract: unique.lua adds a task that holds a unique key
// (uniq: key -> id, uniqexp: key -> hold_until), refuses one while another
// task holds the key (in any state), lets an expired hold go, and in
// debounce mode replaces a holder that is still scheduled (deleting it,
// state.debounced) with the new task.
func TestUniqueContract(t *testing.T) {
	hour := at(time.Hour)
	later := EnqMsg{ID: "y", Msg: "m-y", Tenant: "a", Due: at(time.Minute)}
	runContracts(t, []contract{{
		name: "unique, no holder: added, holds the key",
		call: uniqueCall(ModeUnique, "k", hour, task("x", "a")),
		want: uniqueReply{true, "x", ""},
		edit: func(s *Snap, q string) {
			mx := member("a", 0, 1, "x")
			s.Tasks = map[string]string{"x": "m-x", "x|m": mx}
			s.Pending, s.Tenants = []Z{{mx, 0}}, []Z{{"a", 0}}
			s.State = map[string]string{"seq": "1", "w:a": "1", "enqueued": "1"}
			s.Uniq, s.UniqExp = map[string]string{"k": "x"}, []Z{{"k", msf(hour)}}
			s.Wake = tokens(1)
		},
	}, {
		name:  "unique, held by a pending task: refused with the holder",
		setup: func(t *testing.T, r *RDB, q string) { holding(t, r, q, ModeUnique, "k", hour, task("x", "a")) },
		call:  uniqueCall(ModeUnique, "k", hour, task("y", "a")),
		want:  uniqueReply{false, "x", ""},
	}, {
		name: "unique, held by a task that is done: still refused",
		setup: func(t *testing.T, r *RDB, q string) {
			holding(t, r, q, ModeUnique, "k", hour, task("x", "a"))
			dequeue(t, r, q, 1)
			if _, err := r.Ack(t.Context(), q, t0, []AckItem{{ID: "x"}}); err != nil {
				t.Fatal(err)
			}
		},
		call: uniqueCall(ModeUnique, "k", hour, task("y", "a")),
		want: uniqueReply{false, "x", ""},
	}, {
		name: "unique, the hold ended at now: dropped, the new task holds",
		setup: func(t *testing.T, r *RDB, q string) {
			holding(t, r, q, ModeUnique, "k", t0, task("x", "a"))
			holding(t, r, q, ModeUnique, "other", at(-time.Second), task("w", "a"))
		},
		call: uniqueCall(ModeUnique, "k", hour, task("y", "a")),
		want: uniqueReply{true, "y", ""},
		edit: func(s *Snap, q string) {
			my := member("a", 0, 3, "y")
			s.Tasks["y"], s.Tasks["y|m"] = "m-y", my
			s.Pending = put(s.Pending, my, 0)
			s.State["seq"], s.State["enqueued"] = "3", "3"
			s.Uniq, s.UniqExp = map[string]string{"k": "y"}, []Z{{"k", msf(hour)}}
			s.Wake = tokens(1)
		},
	}, {
		name:  "unique, the id exists: not added, nothing held",
		setup: func(t *testing.T, r *RDB, q string) { enqueue(t, r, q, task("x", "a")); clearWake(t, r, q) },
		call:  uniqueCall(ModeUnique, "k", hour, task("x", "a")),
		want:  uniqueReply{false, "x", ""},
	}, {
		name: "debounce, holder still scheduled: replaced",
		setup: func(t *testing.T, r *RDB, q string) {
			holding(t, r, q, ModeDebounce, "k", at(time.Second), debounced("x"))
		},
		call: uniqueCall(ModeDebounce, "k", at(time.Minute), later),
		want: uniqueReply{true, "y", "x"},
		edit: func(s *Snap, q string) {
			my := member("a", 0, 2, "y")
			s.Tasks = map[string]string{"y": "m-y", "y|m": my}
			s.Scheduled = []Z{{my, msf(at(time.Minute))}}
			s.State["seq"], s.State["enqueued"], s.State["debounced"] = "2", "2", "1"
			s.Uniq, s.UniqExp = map[string]string{"k": "y"}, []Z{{"k", msf(at(time.Minute))}}
		},
	}, {
		name: "debounce, the same id: its payload and due time replaced",
		setup: func(t *testing.T, r *RDB, q string) {
			holding(t, r, q, ModeDebounce, "k", at(time.Second), debounced("x"))
		},
		call: uniqueCall(ModeDebounce, "k", at(time.Minute), EnqMsg{ID: "x", Msg: "new", Tenant: "a", Due: at(time.Minute)}),
		want: uniqueReply{true, "x", "x"},
		edit: func(s *Snap, q string) {
			mx := member("a", 0, 2, "x")
			s.Tasks = map[string]string{"x": "new", "x|m": mx}
			s.Scheduled = []Z{{mx, msf(at(time.Minute))}}
			s.State["seq"], s.State["enqueued"], s.State["debounced"] = "2", "2", "1"
			s.Uniq, s.UniqExp = map[string]string{"k": "x"}, []Z{{"k", msf(at(time.Minute))}}
		},
	}, {
		name: "debounce, holder already pending: kept, the new task holds",
		setup: func(t *testing.T, r *RDB, q string) {
			holding(t, r, q, ModeDebounce, "k", at(time.Second), task("x", "a"))
		},
		call: uniqueCall(ModeDebounce, "k", at(time.Minute), later),
		want: uniqueReply{true, "y", ""},
		edit: func(s *Snap, q string) {
			my := member("a", 0, 2, "y")
			s.Tasks["y"], s.Tasks["y|m"] = "m-y", my
			s.Scheduled = []Z{{my, msf(at(time.Minute))}}
			s.State["seq"], s.State["enqueued"] = "2", "2"
			s.Uniq, s.UniqExp = map[string]string{"k": "y"}, []Z{{"k", msf(at(time.Minute))}}
		},
	}, {
		// The new task cannot be added (its id is another task's): the
		// scheduled holder must not be deleted for it.
		name: "debounce, the id is another task's: refused, the holder kept",
		setup: func(t *testing.T, r *RDB, q string) {
			holding(t, r, q, ModeDebounce, "k", at(time.Second), debounced("x"))
			enqueue(t, r, q, task("y", "a"))
			clearWake(t, r, q)
		},
		call: uniqueCall(ModeDebounce, "k", at(time.Minute), later),
		want: uniqueReply{false, "y", ""},
	}, {
		name: "an unknown mode is refused",
		setup: func(t *testing.T, r *RDB, q string) {
			holding(t, r, q, ModeDebounce, "k", at(time.Second), debounced("x"))
		},
		call: func(t *testing.T, r *RDB, q string) any {
			err := uniqueScript.Exec(t.Context(), r.c, QueueKeys(q), []string{ms(t0), "once", "k", ms(at(time.Hour)),
				"y", "m-y", "a", "0", "ff", "0"}).Error()
			if err == nil {
				return nil
			}
			return err.Error()
		},
		want: `unique: mode "once": want unique or debounce`,
	}})
}

// debounced is task id of tenant a, due in a second.
func debounced(id string) EnqMsg {
	return EnqMsg{ID: id, Msg: "m-" + id, Tenant: "a", Due: at(time.Second)}
}

// TestUniqueTwoEnqueuesNeverBothAdd: the header's atomicity guarantee,
// under 16 concurrent enqueues of one key.
func TestUniqueTwoEnqueuesNeverBothAdd(t *testing.T) {
	r := openTest(t)
	q := newQueue(t, r, "q")
	var wg sync.WaitGroup
	added := make(chan string, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, _, _, err := r.EnqueueUnique(t.Context(), q, t0, ModeUnique, "k", at(time.Hour), task(fmt.Sprint("x", i), "a"))
			if err != nil {
				t.Error(err)
			}
			if ok {
				added <- fmt.Sprint("x", i)
			}
		}()
	}
	wg.Wait()
	close(added)
	var ids []string
	for id := range added {
		ids = append(ids, id)
	}
	s := snap(t, r, q)
	if len(ids) != 1 || s.Uniq["k"] != ids[0] || len(s.Pending) != 1 {
		t.Errorf("added %v, key held by %q, %d pending: want exactly one added and holding", ids, s.Uniq["k"], len(s.Pending))
	}
}
