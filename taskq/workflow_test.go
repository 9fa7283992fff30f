package taskq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

// ordering records when each task started and ended, on one counter, and
// how many times each ran.
type ordering struct {
	mu         sync.Mutex
	n          int
	start, end map[string]int
	runs       map[string]int
}

func newOrdering() *ordering {
	return &ordering{start: map[string]int{}, end: map[string]int{}, runs: map[string]int{}}
}

func (o *ordering) began(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
	o.start[id] = o.n
	o.runs[id]++
}

func (o *ordering) ended(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
	o.end[id] = o.n
}

// after fails unless id started after each of parents ended.
func (o *ordering) after(t *testing.T, id string, parents []string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range parents {
		if o.end[p] == 0 || o.start[id] < o.end[p] {
			t.Fatalf("%s started at %d, before its parent %s ended (%d)", id, o.start[id], p, o.end[p])
		}
	}
}

func (o *ordering) count(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.runs[id]
}

// joinResults is the parents' results of t, in parent order, joined.
func joinResults(ctx context.Context, t *Task) (string, error) {
	res, err := t.ParentResults(ctx)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range t.Parents() {
		b.Write(res[p])
	}
	return b.String(), nil
}

// TestChainAndChord: a chain of 5 runs in order, each node reading its
// predecessor's result (the last one's is "abcde"); a chord of 100 runs
// its callback once, after every member ended, with all 100 results; no
// node runs twice.
func TestChainAndChord(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	log := newOrdering()
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 8})
	w.Handle("letter", func(ctx context.Context, tk *Task) error {
		log.began(tk.ID())
		defer log.ended(tk.ID())
		prev, err := joinResults(ctx, tk)
		tk.SetResult([]byte(prev + string(tk.Payload)))
		return err
	})
	var sum, calls int
	w.Handle("sum", func(ctx context.Context, tk *Task) error {
		log.began(tk.ID())
		defer log.ended(tk.ID())
		res, err := tk.ParentResults(ctx)
		calls++
		sum = len(res)
		for _, r := range res {
			sum += len(r)
		}
		return err
	})
	runWorker(t, w)
	in, err := NewInspector(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()

	var steps []*Task
	for _, l := range "abcde" {
		steps = append(steps, NewTask("letter", []byte(string(l))))
	}
	chain, err := c.EnqueueWorkflow(ctx, Chain(steps...), Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	d, err := in.Get(ctx, q, chain.Tasks["3"])
	if err != nil || d.State != StateWaiting && d.State != StateCompleted && d.State != StatePending && d.State != StateActive {
		t.Fatalf("node 3 right after the enqueue: %+v, %v", d, err)
	}
	members := make([]*Task, 100)
	for i := range members {
		members[i] = NewTask("letter", []byte(fmt.Sprint(i%10)))
	}
	chord, err := c.EnqueueWorkflow(ctx, Chord(members, NewTask("sum", nil)), Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the chain's last node and the callback completed", func() bool {
		a, err1 := in.Get(ctx, q, chain.Tasks["5"])
		b, err2 := in.Get(ctx, q, chord.Tasks["callback"])
		return err1 == nil && err2 == nil && a.State == StateCompleted && b.State == StateCompleted
	})
	if d, _ := in.Get(ctx, q, chain.Tasks["5"]); string(d.Result) != "abcde" {
		t.Fatalf("the chain's last result: %q; want abcde", d.Result)
	}
	for i := 2; i <= 5; i++ {
		log.after(t, chain.Tasks[fmt.Sprint(i)], []string{chain.Tasks[fmt.Sprint(i-1)]})
	}
	var group []string
	for i := 1; i <= 100; i++ {
		group = append(group, chord.Tasks[fmt.Sprint(i)])
	}
	log.after(t, chord.Tasks["callback"], group)
	if calls != 1 || sum != 200 { // 100 results of one byte each, plus 100 present
		t.Fatalf("callback: %d calls, sum %d; want 1 and 200", calls, sum)
	}
	for _, id := range append(group, chord.Tasks["callback"]) {
		if n := log.count(id); n != 1 {
			t.Fatalf("%s ran %d times", id, n)
		}
	}
}

// TestDAGOrder: a random DAG of 2,000 nodes in 25 layers (each node after
// 1–3 nodes of the layer above) completes, every node after its parents,
// each once.
func TestDAGOrder(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	log := newOrdering()
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 16})
	w.Handle("node", func(ctx context.Context, tk *Task) error {
		log.began(tk.ID())
		log.ended(tk.ID())
		return nil
	})
	runWorker(t, w)
	const n, layers = 2000, 25
	rng := rand.New(rand.NewPCG(1, 2))
	wf := NewWorkflow()
	byLayer := make([][]string, layers)
	parents := map[string][]string{}
	for i := range n {
		l, name := i*layers/n, fmt.Sprint("n", i)
		var after []string
		if l > 0 {
			above := byLayer[l-1]
			for range 1 + rng.IntN(3) {
				if p := above[rng.IntN(len(above))]; !contains(after, p) {
					after = append(after, p)
				}
			}
		}
		wf.Add(name, NewTask("node", nil), after...)
		byLayer[l] = append(byLayer[l], name)
		parents[name] = after
	}
	info, err := c.EnqueueWorkflow(ctx, wf, Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "2,000 nodes completed", func() bool { return queueStats(t, c, q).Completed == n })
	for name, ps := range parents {
		ids := make([]string, len(ps))
		for i, p := range ps {
			ids[i] = info.Tasks[p]
		}
		log.after(t, info.Tasks[name], ids)
		if k := log.count(info.Tasks[name]); k != 1 {
			t.Fatalf("%s ran %d times", name, k)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestWorkflowFailureAndCancel: a node that dies cancels every node
// waiting below it (none of them runs; each names the parent), nodes on
// other branches run; cancelling a node of another workflow cancels its
// descendants too. An unknown parent (a cycle cannot be written) is
// refused at enqueue.
func TestWorkflowFailureAndCancel(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	log := newOrdering()
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 4})
	w.Handle("ok", func(ctx context.Context, tk *Task) error { log.began(tk.ID()); log.ended(tk.ID()); return nil })
	w.Handle("bad", func(ctx context.Context, tk *Task) error { log.began(tk.ID()); return SkipRetry })
	hold := make(chan struct{})
	w.Handle("hold", func(ctx context.Context, tk *Task) error {
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return ctx.Err()
	})
	runWorker(t, w)
	in, err := NewInspector(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()

	_, err = c.EnqueueWorkflow(ctx, NewWorkflow().Add("a", NewTask("ok", nil), "b").Add("b", NewTask("ok", nil), "a"), Queue(q))
	if !errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), "not in the workflow") {
		t.Fatalf("a workflow naming a parent not added before: %v; want it refused", err)
	}
	for _, bad := range []string{"step one", "a|wp", "", strings.Repeat("x", 129)} {
		if _, err := c.EnqueueWorkflow(ctx, NewWorkflow().Add(bad, NewTask("ok", nil)), Queue(q)); !errors.Is(err, ErrInvalidTask) {
			t.Fatalf("node name %q: %v; want it refused", bad, err)
		}
	}

	// A waiting node is not run ahead of its parents; deleting a node
	// cancels the nodes waiting below it.
	parked, err := c.EnqueueWorkflow(ctx, Chain(NewTask("ok", nil, ProcessIn(time.Hour)), NewTask("ok", nil), NewTask("ok", nil)), Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Run(ctx, q, parked.Tasks["2"]); !errors.Is(err, ErrTaskState) {
		t.Fatalf("run of a waiting node: %v; want ErrTaskState", err)
	}
	if d, err := in.Get(ctx, q, parked.Tasks["2"]); err != nil || d.State != StateWaiting {
		t.Fatalf("node 2 after a refused run: %s, %v; want waiting", d.State, err)
	}
	if _, err := in.Delete(ctx, q, parked.Tasks["1"]); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"2", "3"} {
		if d, err := in.Get(ctx, q, parked.Tasks[name]); err != nil || d.State != StateCancelled || !strings.Contains(d.LastError, "deleted") {
			t.Fatalf("node %s after its ancestor's delete: %s %q, %v; want cancelled", name, d.State, d.LastError, err)
		}
	}

	wf := NewWorkflow().Add("root", NewTask("ok", nil)).
		Add("bad", NewTask("bad", nil), "root").Add("below", NewTask("ok", nil), "bad").Add("deeper", NewTask("ok", nil), "below").
		Add("side", NewTask("ok", nil), "root").Add("join", NewTask("ok", nil), "side", "deeper")
	info, err := c.EnqueueWorkflow(ctx, wf, Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	states := func(wi *WorkflowInfo) map[string]string {
		out := map[string]string{}
		for name, id := range wi.Tasks {
			d, err := in.Get(ctx, q, id)
			out[name] = d.State + fmt.Sprint(err)
			if d.State == StateCancelled {
				out[name] = d.State + ": " + d.LastError
			}
		}
		return out
	}
	want := map[string]string{"root": "completed<nil>", "bad": "dead<nil>", "side": "completed<nil>",
		"below": "cancelled: parent " + info.Tasks["bad"] + " failed", "deeper": "cancelled: parent " + info.Tasks["bad"] + " failed",
		"join": "cancelled: parent " + info.Tasks["bad"] + " failed"}
	waitFor(t, 20*time.Second, "the failure to cancel the branch below it", func() bool { return fmt.Sprint(states(info)) == fmt.Sprint(want) })
	for _, name := range []string{"below", "deeper", "join"} {
		if log.count(info.Tasks[name]) != 0 {
			t.Fatalf("%s ran below a failed node", name)
		}
	}

	// Continue on failure: "after" runs once its dead parent ended (and its
	// other parent succeeded), "next" after it; "strict" is cancelled.
	kg := NewWorkflow().Add("ok", NewTask("ok", nil)).Add("bad", NewTask("bad", nil)).
		Add("after", NewTask("ok", nil), "bad", "ok").Add("next", NewTask("ok", nil), "after").Add("strict", NewTask("ok", nil), "bad").
		ContinueOnFailure("after")
	kinfo, err := c.EnqueueWorkflow(ctx, kg, Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	kwant := map[string]string{"ok": "completed<nil>", "bad": "dead<nil>", "after": "completed<nil>", "next": "completed<nil>",
		"strict": "cancelled: parent " + kinfo.Tasks["bad"] + " failed"}
	waitFor(t, 20*time.Second, "the node that continues on failure to run", func() bool { return fmt.Sprint(states(kinfo)) == fmt.Sprint(kwant) })
	log.after(t, kinfo.Tasks["after"], []string{kinfo.Tasks["ok"]})
	if _, err := c.EnqueueWorkflow(ctx, NewWorkflow().Add("a", NewTask("ok", nil)).ContinueOnFailure("nope"), Queue(q)); !errors.Is(err, ErrInvalidTask) {
		t.Fatalf("ContinueOnFailure of an unknown node: %v", err)
	}

	held, err := c.EnqueueWorkflow(ctx, Chain(NewTask("hold", nil), NewTask("ok", nil), NewTask("ok", nil)), Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the first node running", func() bool { d, _ := in.Get(ctx, q, held.Tasks["1"]); return d.State == StateActive })
	if _, err := in.Cancel(ctx, q, held.Tasks["1"], "test"); err != nil {
		t.Fatal(err)
	}
	got := states(held)
	names := make([]string, 0, len(got))
	for name, st := range got {
		if !strings.HasPrefix(st, StateCancelled) {
			names = append(names, name+"="+st)
		}
	}
	sort.Strings(names)
	if len(names) > 0 {
		t.Fatalf("right after cancelling the running first node: %v not cancelled", names)
	}
	close(hold)

	// A whole workflow cancelled while its nodes run: within 1 s none is
	// pending, waiting or running.
	release := make(chan struct{})
	defer close(release)
	w.Handle("slow", func(ctx context.Context, tk *Task) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ctx.Err()
	})
	group := make([]*Task, 10)
	for i := range group {
		group[i] = NewTask("slow", nil)
	}
	big, err := c.EnqueueWorkflow(ctx, Chord(group, NewTask("ok", nil)), Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "chord members running", func() bool {
		d, _ := in.Get(ctx, q, big.Tasks["1"])
		return d.State == StateActive
	})
	// The callback is cancelled with its first cancelled parent, or by
	// itself if the call reaches it first.
	if n, err := in.CancelWorkflow(ctx, big, "test"); err != nil || n < 10 || n > 11 {
		t.Fatalf("CancelWorkflow: %d, %v; want the 10 members cancelled (and maybe the callback)", n, err)
	}
	testutil.WaitFor(t, time.Second, "every node of the cancelled workflow ended", func() (bool, string) {
		nodes, err := in.Workflow(ctx, big)
		for name, d := range nodes {
			if d.State != StateCancelled {
				return false, name + " " + d.State
			}
		}
		return err == nil, fmt.Sprint(err)
	})
}
