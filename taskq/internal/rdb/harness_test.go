package rdb

// The contract tests of the Lua scripts (contract_*_test.go) run each
// script against the real Redis on loopback (internal/testutil.Redis) on a
// queue of their own, and compare what the 21 keys of that queue hold
// afterwards with what the script's header promises: the whole queue,
// snapshot before and after, so that a key the script should not touch is
// seen to be untouched.

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gantryhq/gantry/internal/testutil"
)

// t0 is the "now" of every contract test: scripts take the time from ARGV.
var t0 = time.UnixMilli(1_700_000_000_000)

// at is t0 plus d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// msf is t's unix ms as a score.
func msf(t time.Time) float64 { return float64(t.UnixMilli()) }

// openTest connects to the test Redis; the connection closes with the test.
func openTest(t *testing.T) *RDB {
	t.Helper()
	r, err := Open(testutil.Redis(t))
	if err != nil {
		t.Fatalf("open test redis: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// newQueue returns a queue name unique to this test (and process) whose
// keys are deleted when the test ends. The shared Redis is never flushed.
func newQueue(t *testing.T, r *RDB, name string) string {
	t.Helper()
	q := fmt.Sprintf("rdbc%d-%s-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"), name)
	del := func() {
		// t.Context() ends before cleanups run.
		if err := r.Purge(context.WithoutCancel(t.Context()), q); err != nil {
			t.Errorf("purge %q: %v", q, err)
		}
	}
	del() // a crashed earlier run with the same pid cannot leak into this one
	t.Cleanup(del)
	return q
}

// Z is one member of a sorted set with its score.
type Z struct {
	M string
	S float64
}

// Snap is everything one queue holds in Redis, key by key (see lib.lua).
type Snap struct {
	Pending, Tenants, Lease, Scheduled, Retry, Dead, Completed, Cancelled, UniqExp, Throttled, Groups, Workflows, Tree []Z
	State, Tasks, Active, Results, Uniq, Limits                                                                        map[string]string
	Wake                                                                                                               []string
}

// clone is a deep copy of s, the base of an expected snapshot.
func (s Snap) clone() Snap {
	c := s
	for _, p := range []*[]Z{&c.Pending, &c.Tenants, &c.Lease, &c.Scheduled, &c.Retry, &c.Dead, &c.Completed, &c.Cancelled, &c.UniqExp, &c.Throttled, &c.Groups, &c.Workflows, &c.Tree} {
		*p = append([]Z(nil), (*p)...)
	}
	for _, p := range []*map[string]string{&c.State, &c.Tasks, &c.Active, &c.Results, &c.Uniq, &c.Limits} {
		m := make(map[string]string, len(*p))
		for k, v := range *p {
			m[k] = v
		}
		*p = m
	}
	c.Wake = append([]string(nil), s.Wake...)
	return c
}

// zset returns zs in Redis's order (score, then member bytes).
func zset(zs ...Z) []Z {
	out := append([]Z(nil), zs...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].S != out[j].S {
			return out[i].S < out[j].S
		}
		return out[i].M < out[j].M
	})
	return out
}

// put sets member m of zs to score s (added or moved).
func put(zs []Z, m string, s float64) []Z { return zset(append(del(zs, m), Z{m, s})...) }

// del removes member m from zs.
func del(zs []Z, m string) []Z {
	out := zs[:0:0]
	for _, z := range zs {
		if z.M != m {
			out = append(out, z)
		}
	}
	return out
}

// tokens is a wake list of n tokens.
func tokens(n int) []string {
	w := make([]string, n)
	for i := range w {
		w[i] = "1"
	}
	return w
}

// snap reads all 21 keys of q (extras and state's xt as checkExtras
// checks them, not as part of the snapshot).
func snap(t *testing.T, r *RDB, q string) Snap {
	t.Helper()
	ctx := t.Context()
	k := QueueKeys(q)
	var s Snap
	zsets := map[int]*[]Z{KPending: &s.Pending, KTenants: &s.Tenants, KLease: &s.Lease, KScheduled: &s.Scheduled,
		KRetry: &s.Retry, KDead: &s.Dead, KCompleted: &s.Completed, KCancelled: &s.Cancelled, KUniqExp: &s.UniqExp, KThrottled: &s.Throttled, KGroups: &s.Groups, KWorkflows: &s.Workflows, KTree: &s.Tree}
	for i, p := range zsets {
		zs, err := r.c.Do(ctx, r.c.B().Zrange().Key(k[i]).Min("0").Max("-1").Withscores().Build()).AsZScores()
		if err != nil {
			t.Fatalf("snapshot %s: %v", k[i], err)
		}
		for _, z := range zs {
			*p = append(*p, Z{z.Member, z.Score})
		}
	}
	hashes := map[int]*map[string]string{KState: &s.State, KTasks: &s.Tasks, KActive: &s.Active, KResults: &s.Results, KUniq: &s.Uniq, KLimits: &s.Limits}
	for i, p := range hashes {
		h, err := r.c.Do(ctx, r.c.B().Hgetall().Key(k[i]).Build()).AsStrMap()
		if err != nil {
			t.Fatalf("snapshot %s: %v", k[i], err)
		}
		*p = h
	}
	checkExtras(t, r, q, s.State, s.Tasks)
	delete(s.State, "xt")
	s.Tasks = logicalTasks(s.Tasks)
	w, err := r.c.Do(ctx, r.c.B().Lrange().Key(k[KWake]).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("snapshot %s: %v", k[KWake], err)
	}
	s.Wake = w
	return s
}

// checkExtras fails the test if q's state says its extras set is complete
// (xt) while a task with a field beside its value (tasks' id|…) is not in
// it: dequeue would then miss its retries, and ack leave its fields behind
// (lib.lua extras). A group's own fields (g:<key>|t) belong to no task.
func checkExtras(t *testing.T, r *RDB, q string, state, tasks map[string]string) {
	t.Helper()
	if _, ok := state["xt"]; !ok {
		return
	}
	ids, err := r.c.Do(t.Context(), r.c.B().Smembers().Key(QueueKeys(q)[KExtras]).Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("snapshot extras: %v", err)
	}
	in := make(map[string]bool, len(ids))
	for _, id := range ids {
		in[id] = true
	}
	for f := range tasks {
		j := strings.LastIndexByte(f, '|')
		if j >= 0 && !in[f[:j]] && !strings.HasPrefix(f, "g:") && !isTask(tasks, f) {
			id := f[:j]
			t.Errorf("queue %s: task %s has field %q but is not in its extras set", q, id, f)
		}
	}
}

// isTask reports whether field f of tasks is a task's value (an id with a
// '|' in it), not an extra field: its value has a head (stored.go).
func isTask(tasks map[string]string, f string) bool {
	head, _ := splitStored(tasks[f])
	return head != ""
}

// logicalTasks is the tasks hash h as the contracts state it: the value of
// a task whose member is stored in its value's head (stored.go) is its
// message, and the member appears as id|m, the field earlier releases
// stored it in. A head beside a stored id|m shows as id|m+head, which no
// contract expects.
func logicalTasks(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for f, v := range h {
		out[f] = v
	}
	for f, v := range h {
		head, msg := splitStored(v)
		if head == "" || strings.Contains(f, "|") {
			continue
		}
		out[f] = msg
		if _, ok := h[f+"|m"]; ok {
			out[f+"|m+head"] = head + "\x00" + f
		} else {
			out[f+"|m"] = head + "\x00" + f
		}
	}
	return out
}

// cmpEmpty equates nil and empty slices and maps.
var cmpEmpty = cmpopts.EquateEmpty()

// checkSnap fails the test with a diff if q does not hold exactly want.
func checkSnap(t *testing.T, r *RDB, q string, want Snap) {
	t.Helper()
	if d := cmp.Diff(want, snap(t, r, q), cmpopts.EquateEmpty()); d != "" {
		t.Errorf("queue %s after the call (-want +got):\n%s", q, d)
	}
}

// member is the pending/scheduled/retry member of task id of tenant with
// priority prio, the seq-th task enqueued into its queue (lib.lua).
func member(tenant string, prio, seq int, id string) string {
	return fmt.Sprintf("%s\x00%02x%s\x00%s", tenant, 255-prio, seqDigits(seq), id)
}

// stored is the tasks-hash value add_task writes for a task of member m
// with message msg (stored.go).
func stored(m, msg string) string { return "\x01" + m[:strings.LastIndexByte(m, 0)] + msg }

// legacy rewrites task id of q as a release before this one stored it: the
// bare message, with its member in id|m if withMember (the previous
// release), else nowhere (the one before).
func legacy(t *testing.T, r *RDB, q, id string, withMember bool) {
	t.Helper()
	k := QueueKeys(q)[KTasks]
	v, err := r.c.Do(t.Context(), r.c.B().Hget().Key(k).Field(id).Build()).ToString()
	if err != nil {
		t.Fatalf("legacy %s: %v", id, err)
	}
	head, msg := splitStored(v)
	if head == "" {
		t.Fatalf("legacy %s: value %q has no head", id, v)
	}
	raw(t, r, "HSET", k, id, msg)
	if withMember {
		raw(t, r, "HSET", k, id+"|m", head+"\x00"+id)
	}
}

// seqDigits is lib.lua's seq_digits: n in 8 base-64 digits '0'..'o'.
func seqDigits(n int) string {
	d := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		d[i] = byte('0' + n%64)
		n /= 64
	}
	return string(d)
}

// task is an EnqMsg whose message is "m-"+id.
func task(id, tenant string) EnqMsg { return EnqMsg{ID: id, Msg: "m-" + id, Tenant: tenant} }

// enqueue adds msgs at t0 and fails the test unless all were added.
func enqueue(t *testing.T, r *RDB, q string, msgs ...EnqMsg) {
	t.Helper()
	n, err := r.Enqueue(t.Context(), q, t0, msgs)
	if err != nil || n != len(msgs) {
		t.Fatalf("enqueue %d tasks into %s: added %d, %v", len(msgs), q, n, err)
	}
}

// enqueueAt adds msgs at now and fails the test unless all were added.
func enqueueAt(t *testing.T, r *RDB, q string, now time.Time, msgs ...EnqMsg) {
	t.Helper()
	n, err := r.Enqueue(t.Context(), q, now, msgs)
	if err != nil || n != len(msgs) {
		t.Fatalf("enqueue %d tasks into %s: added %d, %v", len(msgs), q, n, err)
	}
}

// dequeue takes up to n tasks of q at t0 with a lease until t0+30s and
// returns their ids in order.
func dequeue(t *testing.T, r *RDB, q string, n int) []string {
	t.Helper()
	deq, err := r.Dequeue(t.Context(), []string{q}, n, t0, at(30*time.Second))
	ds := deq.Tasks
	if err != nil {
		t.Fatalf("dequeue %d from %s: %v", n, q, err)
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	return ids
}

// clearWake empties q's wake list, so that a test sees the tokens its own
// call pushes.
func clearWake(t *testing.T, r *RDB, q string) {
	t.Helper()
	if err := r.c.Do(t.Context(), r.c.B().Del().Key(QueueKeys(q)[KWake]).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// itoa is strconv.Itoa, short for expected hash values.
func itoa(n int) string { return strconv.Itoa(n) }

// raw runs one Redis command (name, key, args…) on r and fails the test on
// an error: how a test puts a queue into the state a case starts from.
func raw(t *testing.T, r *RDB, name, key string, args ...string) {
	t.Helper()
	if err := r.c.Do(t.Context(), r.c.B().Arbitrary(name).Keys(key).Args(args...).Build()).Error(); err != nil {
		t.Fatalf("%s %s %v: %v", name, key, args, err)
	}
	markExtras(t, r, name, key, args)
}

// markExtras does for a raw write what the scripts' writers do (lib.lua
// extra): a task given a field beside its value (HSET or HINCRBY of
// tasks' id|…) joins its queue's extras set, so that a case's setup
// leaves the state the scripts would have left.
func markExtras(t *testing.T, r *RDB, name, key string, args []string) {
	t.Helper()
	tasks, ok := strings.CutSuffix(key, ":tasks")
	if !ok || (name != "HSET" && name != "HINCRBY") {
		return
	}
	for i := 0; i < len(args); i += 2 {
		if j := strings.LastIndexByte(args[i], '|'); j >= 0 && !strings.HasPrefix(args[i], "g:") {
			id := args[i][:j]
			if err := r.c.Do(t.Context(), r.c.B().Sadd().Key(tasks+":extras").Member(id).Build()).Error(); err != nil {
				t.Fatalf("SADD extras %s: %v", id, err)
			}
		}
	}
}

// contract is one case of a script's contract: from the state setup
// leaves, call returns want, and the queue then holds the snapshot taken
// before the call as edit changes it (nothing else changed).
type contract struct {
	name  string
	setup func(t *testing.T, r *RDB, q string)
	call  func(t *testing.T, r *RDB, q string) any
	want  any
	edit  func(s *Snap, q string)
}

// runContracts runs each case on a fresh queue of its own.
func runContracts(t *testing.T, cases []contract) {
	t.Helper()
	r := openTest(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := newQueue(t, r, "q")
			if c.setup != nil {
				c.setup(t, r, q)
			}
			before := snap(t, r, q)
			got := c.call(t, r, q)
			if d := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("reply (-want +got):\n%s", d)
			}
			want := before.clone()
			if c.edit != nil {
				c.edit(&want, q)
			}
			checkSnap(t, r, q, want)
		})
	}
}
