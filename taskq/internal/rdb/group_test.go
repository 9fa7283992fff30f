package rdb

import (
	"encoding/json"
	"testing"
	"time"
)

// groupMsg is a member's message as taskq stores it (the fields a batch
// message copies).
func groupMsg(id string) EnqMsg {
	return EnqMsg{ID: id, Msg: `{"id":"` + id + `","type":"mail","queue":"q","max_retries":3,"payload":"eA=="}`, Tenant: "a"}
}

// TestGroupContract: group.lua keeps a member waiting in its group and
// says when the group is due (min of first + max delay, last + grace);
// maintain.lua hands a due group over as one pending batch task (the first
// member's message with the member ids, no payload) and not before;
// reaching max size hands it over at once; the batch's ack drops the
// members' records. A member joins one batch only.
func TestGroupContract(t *testing.T) {
	r := openTest(t)
	ctx := t.Context()
	q := newQueue(t, r, "q")
	k := QueueKeys(q)
	p := GroupPolicy{MaxSize: 3, Grace: time.Second, MaxDelay: 2 * time.Second}
	join := func(id string, at time.Time) int {
		t.Helper()
		n, err := r.EnqueueGroup(ctx, q, at, groupMsg(id), "k", p)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	due := func() float64 {
		t.Helper()
		s, err := r.c.Do(ctx, r.c.B().Zscore().Key(k[KGroups]).Member("k").Build()).AsFloat64()
		if err != nil {
			t.Fatalf("the group's due time: %v", err)
		}
		return s
	}
	if join("m1", t0) != 1 || due() != msf(t0.Add(time.Second)) {
		t.Fatalf("after one member: due %v; want t0+1s", due())
	}
	if join("m1", t0) != 0 {
		t.Fatal("a second m1 joined")
	}
	if join("m2", t0.Add(800*time.Millisecond)) != 1 || due() != msf(t0.Add(1800*time.Millisecond)) {
		t.Fatalf("after m2 at +0.8s: due %v; want t0+1.8s (grace)", due())
	}
	if res, err := r.Maintain(ctx, q, t0.Add(1799*time.Millisecond), 10, t0, 100); err != nil || res.Promoted != 0 {
		t.Fatalf("maintain before the group is due: %+v, %v", res, err)
	}
	if ids := dequeue(t, r, q, 5); len(ids) != 0 {
		t.Fatalf("dequeued %v before the group was due", ids)
	}
	if res, err := r.Maintain(ctx, q, t0.Add(1800*time.Millisecond), 10, t0, 100); err != nil || res.Promoted != 1 {
		t.Fatalf("maintain when the group is due: %+v, %v; want 1 batch", res, err)
	}
	ds, err := r.Dequeue(ctx, []string{q}, 5, t0.Add(2*time.Second), t0.Add(time.Minute))
	if err != nil || len(ds.Tasks) != 1 {
		t.Fatalf("dequeue the batch: %+v, %v", ds.Tasks, err)
	}
	var m struct {
		ID, Type, Group string
		Batch           []string
		Payload         []byte
		MaxRetries      int `json:"max_retries"`
	}
	if err := json.Unmarshal([]byte(ds.Tasks[0].Msg), &m); err != nil || m.Type != "mail" || len(m.Batch) != 2 || m.Batch[0] != "m1" ||
		m.Batch[1] != "m2" || m.Group != "k" || len(m.Payload) != 0 || m.MaxRetries != 3 || m.ID != ds.Tasks[0].ID {
		t.Fatalf("the batch's message: %s (%+v, %v)", ds.Tasks[0].Msg, m, err)
	}
	if n, err := r.Ack(ctx, q, t0.Add(2*time.Second), []AckItem{{ID: ds.Tasks[0].ID}}); err != nil || n != 1 {
		t.Fatalf("ack the batch: %d, %v", n, err)
	}
	if s := snap(t, r, q); len(s.Tasks) != 0 || len(s.Scheduled) != 0 || len(s.Groups) != 0 {
		t.Fatalf("after the batch's ack: tasks %v scheduled %v groups %v; want nothing left", s.Tasks, s.Scheduled, s.Groups)
	}

	// Max delay: members every 0.9 s never leave a grace second of quiet.
	for i, id := range []string{"d1", "d2"} {
		join(id, t0.Add(time.Duration(i)*900*time.Millisecond))
	}
	if due() != msf(t0.Add(1900*time.Millisecond)) {
		t.Fatalf("due %v; want t0+1.9s", due())
	}
	p.MaxSize = 100 // the group keeps its first member's policy: still 3
	if join("d3", t0.Add(1800*time.Millisecond)) != 2 {
		t.Fatal("the third member did not fill the group of 3")
	}
	if ids := dequeue(t, r, q, 5); len(ids) != 1 {
		t.Fatalf("after the group filled: dequeued %v; want its batch", ids)
	}
	p.MaxSize, p.MaxDelay = 10, 2*time.Second
	for i, id := range []string{"e1", "e2", "e3"} {
		join(id, t0.Add(time.Duration(i)*900*time.Millisecond))
	}
	if due() != msf(t0.Add(2*time.Second)) {
		t.Fatalf("members every 0.9 s: due %v; want t0+2s (max delay)", due())
	}
}
