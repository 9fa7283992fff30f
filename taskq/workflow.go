package taskq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// A Workflow is tasks that depend on each other: a DAG whose nodes run in
// one queue, each only after every node it comes after has succeeded, and
// each able to read its parents' results (Task.ParentResults). A chain
// (Chain) and a group with a callback (Chord) are its two common shapes.
//
// Its nodes are enqueued in one Redis call, and a node's children are
// released by the same call that acknowledges it (ack.lua): no crash of a
// worker or of the enqueuer can lose the hand-off or run a node early. A
// node is a task like any other — fairness, priorities, limits, pause,
// retries, the inspector all apply — that waits in scheduled ("waiting")
// until its parents have succeeded. When a node dies (out of retries,
// SkipRetry) or is cancelled, every node waiting below it is cancelled,
// its last error naming the parent — but for the nodes that continue on
// failure (ContinueOnFailure), for which a dead parent counts as done.
type Workflow struct {
	nodes []wfNode
	index map[string]int
	err   error
}

type wfNode struct {
	name      string
	task      *Task
	after     []string
	keepGoing bool // ContinueOnFailure
}

// Workflow bounds.
const (
	MaxWorkflowNodes = 10000
	// DefaultWorkflowRetention keeps a node's record and result after it
	// succeeds, so its children can read the result, unless the node's
	// own Retention says otherwise.
	DefaultWorkflowRetention = 24 * time.Hour
)

// NewWorkflow returns an empty workflow.
func NewWorkflow() *Workflow { return &Workflow{index: map[string]int{}} }

// Add adds task t as node name, run after the nodes named in after
// (added before it). A name given twice, or an unknown name in after, is
// reported by EnqueueWorkflow.
func (w *Workflow) Add(name string, t *Task, after ...string) *Workflow {
	switch {
	case w.err != nil:
	case !validNodeName(name):
		w.err = fmt.Errorf("%w: workflow node name %q: want 1–128 of A–Z, a–z, 0–9, '.', '_', ':' and '-'", ErrInvalidTask, name)
	case t == nil:
		w.err = fmt.Errorf("%w: workflow node %q has no task", ErrInvalidTask, name)
	}
	if _, dup := w.index[name]; dup && w.err == nil {
		w.err = fmt.Errorf("%w: workflow node %q added twice", ErrInvalidTask, name)
	}
	for _, p := range after {
		if _, ok := w.index[p]; !ok && w.err == nil {
			w.err = fmt.Errorf("%w: workflow node %q comes after %q, which is not in the workflow (add it first)", ErrInvalidTask, name, p)
		}
	}
	w.index[name] = len(w.nodes)
	w.nodes = append(w.nodes, wfNode{name: name, task: t, after: after})
	return w
}

// validNodeName: node names become part of task ids, which the Lua
// scripts join with spaces and suffix with '|'.
func validNodeName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._:-", c)) {
			return false
		}
	}
	return true
}

// ContinueOnFailure makes the named nodes (every node, if none is named)
// run even when a parent dies: a dead parent then counts as done for them
// (it has no result: ParentResults lacks it) instead of cancelling them.
// A cancelled parent still cancels them.
func (w *Workflow) ContinueOnFailure(names ...string) *Workflow {
	if len(names) == 0 {
		for i := range w.nodes {
			w.nodes[i].keepGoing = true
		}
		return w
	}
	for _, name := range names {
		i, ok := w.index[name]
		if !ok {
			if w.err == nil {
				w.err = fmt.Errorf("%w: ContinueOnFailure: no workflow node %q", ErrInvalidTask, name)
			}
			continue
		}
		w.nodes[i].keepGoing = true
	}
	return w
}

// Chain is tasks run one after another, each after the previous one
// succeeded; its nodes are named "1", "2", ….
func Chain(tasks ...*Task) *Workflow {
	w := NewWorkflow()
	for i, t := range tasks {
		var after []string
		if i > 0 {
			after = []string{strconv.Itoa(i)}
		}
		w.Add(strconv.Itoa(i+1), t, after...)
	}
	return w
}

// Chord is group, run side by side (nodes "1", "2", …), and callback
// (node "callback"), run once after every member of group succeeded.
func Chord(group []*Task, callback *Task) *Workflow {
	w := NewWorkflow()
	names := make([]string, len(group))
	for i, t := range group {
		names[i] = strconv.Itoa(i + 1)
		w.Add(names[i], t)
	}
	return w.Add("callback", callback, names...)
}

// WorkflowInfo is an enqueued workflow: its id, queue and the task id of
// each node by name.
type WorkflowInfo struct {
	ID    string            `json:"id"`
	Queue string            `json:"queue"`
	Tasks map[string]string `json:"tasks"`
}

// EnqueueWorkflow enqueues w's nodes in one call, opts applying to each
// (after each task's own options, so they win; every node must land in one
// queue). A
// node keeps its record and result for DefaultWorkflowRetention after it
// succeeds unless its options say otherwise. A workflow may not hold more
// than MaxWorkflowNodes nodes, unique or scheduled tasks but at its roots.
func (c *Client) EnqueueWorkflow(ctx context.Context, w *Workflow, opts ...Option) (*WorkflowInfo, error) {
	if w.err != nil {
		return nil, w.err
	}
	if len(w.nodes) == 0 || len(w.nodes) > MaxWorkflowNodes {
		return nil, fmt.Errorf("%w: a workflow of %d nodes: want 1–%d", ErrInvalidTask, len(w.nodes), MaxWorkflowNodes)
	}
	info := &WorkflowInfo{ID: newID(), Tasks: make(map[string]string, len(w.nodes))}
	for _, n := range w.nodes {
		info.Tasks[n.name] = info.ID + "-" + n.name
	}
	nodes, err := w.prepare(info, time.Now(), opts)
	if err != nil {
		return nil, err
	}
	if err := c.register(ctx, info.Queue); err != nil {
		return nil, err
	}
	record, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	ok, err := c.r.EnqueueWorkflow(ctx, info.Queue, time.Now(), info.ID, string(record), nodes)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: a task id of workflow %s", ErrDuplicateTask, info.ID)
	}
	return info, nil
}

// prepare makes the nodes' messages (each naming the workflow and its
// parents' task ids) and their edges; Add already refused cycles, since a
// node can only come after nodes added before it.
func (w *Workflow) prepare(info *WorkflowInfo, now time.Time, opts []Option) ([]rdb.WfNode, error) {
	children := make([][]string, len(w.nodes))
	for _, n := range w.nodes {
		for _, p := range n.after {
			children[w.index[p]] = append(children[w.index[p]], info.Tasks[n.name])
		}
	}
	out := make([]rdb.WfNode, len(w.nodes))
	for i, n := range w.nodes {
		parents := make([]string, len(n.after))
		for j, p := range n.after {
			parents[j] = info.Tasks[p]
		}
		extra := append(append([]Option{}, opts...), TaskID(info.Tasks[n.name]), inWorkflow(info.ID, parents))
		p, err := prepare(n.task, now, extra)
		if err != nil {
			return nil, fmt.Errorf("workflow node %q: %w", n.name, err)
		}
		switch {
		case info.Queue == "":
			info.Queue = p.queue
		case p.queue != info.Queue:
			return nil, fmt.Errorf("%w: workflow node %q is in queue %q, the others in %q: a workflow runs in one queue", ErrInvalidTask, n.name, p.queue, info.Queue)
		}
		if p.o.uniqueKey != "" || p.o.group != "" || len(parents) > 0 && !p.msg.Due.IsZero() {
			return nil, fmt.Errorf("%w: workflow node %q: unique or grouped tasks, and scheduled ones but at the roots, cannot be workflow nodes", ErrInvalidTask, n.name)
		}
		out[i] = rdb.WfNode{EnqMsg: p.msg, Parents: len(parents), Children: children[i], KeepGoing: n.keepGoing}
	}
	return out, nil
}

// inWorkflow marks a task as node of workflow wf after parents, and gives
// it the workflow retention unless it has one.
func inWorkflow(wf string, parents []string) Option {
	return func(o *options) {
		o.workflow, o.parents = wf, parents
		if o.retention == 0 {
			o.retention = DefaultWorkflowRetention
		}
	}
}

// Workflow is the id of the workflow the task is a node of ("" if none).
func (t *Task) Workflow() string { return t.workflow }

// Parents are the task ids of the workflow nodes this one ran after.
func (t *Task) Parents() []string { return t.parents }

// ErrNoResults is returned by ParentResults outside a worker.
var ErrNoResults = errors.New("taskq: results are read by a task a worker runs")

// ParentResults reads the results its parents wrote (Task.SetResult), by
// task id; a parent that wrote none is absent.
func (t *Task) ParentResults(ctx context.Context) (map[string][]byte, error) {
	if t.run == nil || t.run.results == nil {
		return nil, ErrNoResults
	}
	return t.run.results(ctx, t.parents)
}

// Workflow reads every node of the workflow info describes, by name.
func (i *Inspector) Workflow(ctx context.Context, info *WorkflowInfo) (map[string]TaskDetail, error) {
	out := make(map[string]TaskDetail, len(info.Tasks))
	for name, id := range info.Tasks {
		d, err := i.Get(ctx, info.Queue, id)
		if err != nil && !errors.Is(err, ErrTaskNotFound) {
			return nil, err
		}
		out[name] = d
	}
	return out, nil
}

// CancelWorkflow cancels every node of the workflow info describes that
// has not ended: waiting and pending nodes never run, running ones have
// their handlers cancelled (as Cancel). It returns how many it cancelled
// itself (not counting those cancelled with an ancestor).
func (i *Inspector) CancelWorkflow(ctx context.Context, info *WorkflowInfo, who string) (int, error) {
	n := 0
	for _, id := range info.Tasks {
		_, err := i.Cancel(ctx, info.Queue, id, who)
		switch {
		case err == nil:
			n++
		case errors.Is(err, ErrTaskState), errors.Is(err, ErrTaskNotFound):
			// ended already, or cancelled with an ancestor just now
		default:
			return n, err
		}
	}
	return n, nil
}

// LoadWorkflow reads what EnqueueWorkflow returned for workflow id of
// queue (kept as long as dead tasks, the dead retention);
// ErrTaskNotFound if there is none.
func (i *Inspector) LoadWorkflow(ctx context.Context, queue, id string) (*WorkflowInfo, error) {
	rec, err := i.r.WorkflowRecord(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	if rec == "" {
		return nil, fmt.Errorf("%w: workflow %s in queue %s", ErrTaskNotFound, id, queue)
	}
	var info WorkflowInfo
	if err := json.Unmarshal([]byte(rec), &info); err != nil {
		return nil, fmt.Errorf("taskq: workflow %s: stored record: %w", id, err)
	}
	return &info, nil
}

// Workflows lists the ids of queue's workflows, newest first (at most
// limit).
func (i *Inspector) Workflows(ctx context.Context, queue string, limit int) ([]string, error) {
	if err := checkName("queue", queue); err != nil {
		return nil, err
	}
	return i.r.Workflows(ctx, queue, limit)
}
