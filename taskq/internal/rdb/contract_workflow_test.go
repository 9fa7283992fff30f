package rdb

import (
	"testing"
	"time"
)

// waitingScore is a waiting workflow node's score in scheduled (lib.lua
// WAITING).
const waitingScore = 9e15

// diamond is a workflow x → (y, z) → w in tenant a.
func diamond() []WfNode {
	return []WfNode{
		{EnqMsg: task("x", "a"), Children: []string{"y", "z"}},
		{EnqMsg: task("y", "a"), Parents: 1, Children: []string{"w"}},
		{EnqMsg: task("z", "a"), Parents: 1, Children: []string{"w"}},
		{EnqMsg: task("w", "a"), Parents: 2},
	}
}

func workflowCall(nodes []WfNode) func(t *testing.T, r *RDB, q string) any {
	return func(t *testing.T, r *RDB, q string) any {
		ok, err := r.EnqueueWorkflow(t.Context(), q, t0, "wf", `{"x":"x"}`, nodes)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
}

// TestWorkflowContract: workflow.lua adds every node — the roots pending
// (one token), the others waiting in scheduled at WAITING with their
// parent counts, each node's children kept — or none if an id exists;
// ack.lua releases a child with its last parent's ack (in the same call,
// one token) and not before; fail.lua's death and cancel.lua cancel every
// node waiting below.
func TestWorkflowContract(t *testing.T) {
	mx, my, mz, mw := member("a", 0, 1, "x"), member("a", 0, 2, "y"), member("a", 0, 3, "z"), member("a", 0, 4, "w")
	enqueued := func(s *Snap) {
		s.Tasks = map[string]string{"x": "m-x", "x|m": mx, "x|wc": "y z", "y": "m-y", "y|m": my, "y|wp": "1", "y|wc": "w",
			"z": "m-z", "z|m": mz, "z|wp": "1", "z|wc": "w", "w": "m-w", "w|m": mw, "w|wp": "2"}
		s.Pending = []Z{{mx, 0}}
		s.Tenants = []Z{{"a", 0}}
		s.Scheduled = zset(Z{my, waitingScore}, Z{mz, waitingScore}, Z{mw, waitingScore})
		s.State = map[string]string{"seq": "4", "w:a": "1", "enqueued": "4", "links": "1"}
		s.Tasks["wf:wf"] = `{"x":"x"}`
		s.Workflows = []Z{{"wf", msf(t0)}}
	}
	ranX := func(t *testing.T, r *RDB, q string) {
		workflowCall(diamond())(t, r, q)
		if ids := dequeue(t, r, q, 1); len(ids) != 1 || ids[0] != "x" {
			t.Fatalf("dequeued %v, want x", ids)
		}
		clearWake(t, r, q)
	}
	runContracts(t, []contract{{
		name: "a diamond: x pending, y, z and w waiting",
		call: workflowCall(diamond()),
		want: true,
		edit: func(s *Snap, q string) { enqueued(s); s.Wake = tokens(1) },
	}, {
		name:  "an id that exists: nothing added",
		setup: func(t *testing.T, r *RDB, q string) { enqueue(t, r, q, task("z", "b")) },
		call:  workflowCall(diamond()),
		want:  false,
	}, {
		name:  "x's ack releases y and z, not w",
		setup: ranX,
		call:  ackCall(AckItem{ID: "x", KeepUntil: at(time.Hour), Result: []byte("rx")}),
		want:  1,
		edit: func(s *Snap, q string) {
			delete(s.Tasks, "y|wp")
			delete(s.Tasks, "z|wp")
			delete(s.Tasks, "x|wc")
			s.Scheduled = []Z{{mw, waitingScore}}
			s.Pending = zset(Z{my, 0}, Z{mz, 0})
			s.Tenants = []Z{{"a", 1}}
			s.Active, s.Lease = nil, nil
			s.Completed = []Z{{"x", msf(at(time.Hour))}}
			s.Results = map[string]string{"x": "rx"}
			s.State["a:a"], s.State["c:a"], s.State["completed"], s.State["processed"] = "0", "1", "1", "1"
			s.Wake = tokens(1)
		},
	}, {
		name:  "x's death cancels y, z and w",
		setup: ranX,
		call:  failCall("x", time.Time{}, "out of retries"),
		want:  FailDead,
		edit: func(s *Snap, q string) {
			for _, id := range []string{"y", "z", "w"} {
				delete(s.Tasks, id+"|wp")
				s.Tasks[id+"|c"] = "workflow\x00" + ms(t0)
				s.Tasks[id+"|e"] = "parent x failed"
			}
			s.Tasks["x|e"], s.Tasks["x|d"] = "boom", "out of retries"
			s.Scheduled = nil
			s.Cancelled = zset(Z{"y", msf(t0)}, Z{"z", msf(t0)}, Z{"w", msf(t0)})
			s.Dead = []Z{{"x", msf(t0)}}
			s.Active, s.Lease = nil, nil
			s.State["a:a"], s.State["processed"], s.State["failed"], s.State["deadtotal"], s.State["cancelled"] = "0", "1", "1", "1", "3"
		},
	}})
}
