package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"github.com/gantryhq/gantry/taskq"
)

// The workflow list's bounds. Counting a workflow's node states reads
// every node (one Redis read each), so the list gives every listed
// workflow's node count but the state counts of the newest
// workflowStatesMax only, and of those only while the nodes read stay
// within workflowStatesNodes (a big chord can use up the budget alone);
// the others' states are left out, and opening one shows them.
const (
	workflowListMax     = 100
	workflowStatesMax   = 20
	workflowStatesNodes = 2000
)

// stateGone is the state of a node whose task record is gone (its
// retention passed, or it was deleted).
const stateGone = "gone"

// WorkflowSummary is one workflow of the list.
type WorkflowSummary struct {
	ID    string `json:"id"`
	Nodes int    `json:"nodes"`
	// States counts the nodes by state; absent past the list's budget.
	States map[string]int `json:"states,omitempty"`
}

// WorkflowView is one workflow: its nodes, parents before children.
type WorkflowView struct {
	ID    string         `json:"id"`
	Queue string         `json:"queue"`
	Nodes []WorkflowNode `json:"nodes"`
}

// WorkflowNode is one node of a workflow with the names of its parents
// and its depth: the longest path to it from a root (a root's is 0).
type WorkflowNode struct {
	Name      string   `json:"name"`
	ID        string   `json:"id"`
	Type      string   `json:"type"`
	State     string   `json:"state"`
	Parents   []string `json:"parents"`
	Depth     int      `json:"depth"`
	LastError string   `json:"last_error,omitempty"`
	Starts    int      `json:"starts"`
}

// workflows lists a queue's newest workflows (GET /api/workflows?queue=Q).
func (d *Dashboard) workflows(w http.ResponseWriter, r *http.Request) {
	ctx, in, queue := r.Context(), d.cfg.Inspector, r.URL.Query().Get("queue")
	ids, err := in.Workflows(ctx, queue, workflowListMax)
	if err != nil {
		d.fail(w, err)
		return
	}
	out := make([]WorkflowSummary, 0, len(ids))
	read := 0 // nodes read for state counts
	for _, id := range ids {
		info, err := in.LoadWorkflow(ctx, queue, id)
		if errors.Is(err, taskq.ErrTaskNotFound) {
			continue // its record expired since the listing
		}
		if err != nil {
			d.fail(w, err)
			return
		}
		s := WorkflowSummary{ID: id, Nodes: len(info.Tasks)}
		if len(out) < workflowStatesMax && read+s.Nodes <= workflowStatesNodes {
			nodes, err := in.Workflow(ctx, info)
			if err != nil {
				d.fail(w, err)
				return
			}
			read += s.Nodes
			s.States = map[string]int{}
			for _, n := range nodes {
				s.States[nodeState(n)]++
			}
		}
		out = append(out, s)
	}
	writeJSON(w, http.StatusOK, map[string]any{"workflows": out})
}

// workflow shows one workflow (GET /api/workflow?queue=Q&id=W).
func (d *Dashboard) workflow(w http.ResponseWriter, r *http.Request) {
	ctx, in, q := r.Context(), d.cfg.Inspector, r.URL.Query()
	queue, id := q.Get("queue"), q.Get("id")
	if queue == "" || id == "" {
		d.fail(w, fmt.Errorf("%w: want a queue and an id", errBadRequest))
		return
	}
	info, err := in.LoadWorkflow(ctx, queue, id)
	if err != nil {
		d.fail(w, err)
		return
	}
	nodes, err := in.Workflow(ctx, info)
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, WorkflowView{ID: info.ID, Queue: info.Queue, Nodes: workflowGraph(info, nodes)})
}

// workflowCancel cancels every node of a workflow that has not ended
// (POST /api/workflow/cancel {"queue","id"}).
func (d *Dashboard) workflowCancel(w http.ResponseWriter, r *http.Request) {
	b, ok := d.body(w, r)
	if !ok {
		return
	}
	if b.ID == "" {
		d.fail(w, fmt.Errorf("%w: want the workflow's id", errBadRequest))
		return
	}
	info, err := d.cfg.Inspector.LoadWorkflow(r.Context(), b.Queue, b.ID)
	n := 0
	if err == nil {
		n, err = d.cfg.Inspector.CancelWorkflow(r.Context(), info, "queue ui "+r.RemoteAddr)
	}
	d.cfg.Logger.Info("queue ui: workflow cancel", "queue", b.Queue, "id", b.ID, "remote", r.RemoteAddr, "n", n, "err", err)
	if err != nil {
		d.fail(w, err)
		return
	}
	d.changed()
	writeJSON(w, http.StatusOK, map[string]int{"cancelled": n})
}

func nodeState(t taskq.TaskDetail) string {
	if t.State == "" {
		return stateGone
	}
	return t.State
}

// workflowGraph is info's nodes, each with its parents' names and its
// depth, ordered by depth (parents before children) and then by name
// (numbers by value: a chain's "2" before its "10"). A node whose record
// is gone has no known parents.
func workflowGraph(info *taskq.WorkflowInfo, details map[string]taskq.TaskDetail) []WorkflowNode {
	nameOf := make(map[string]string, len(info.Tasks))
	for name, id := range info.Tasks {
		nameOf[id] = name
	}
	nodes := make(map[string]*WorkflowNode, len(info.Tasks))
	children := map[string][]string{}
	for name, id := range info.Tasks {
		t := details[name]
		n := &WorkflowNode{Name: name, ID: id, Type: t.Type, State: nodeState(t), Parents: []string{},
			LastError: t.LastError, Starts: t.Starts}
		for _, pid := range t.Parents {
			if p, ok := nameOf[pid]; ok {
				n.Parents = append(n.Parents, p)
				children[p] = append(children[p], name)
			}
		}
		sort.Slice(n.Parents, func(i, j int) bool { return nameLess(n.Parents[i], n.Parents[j]) })
		nodes[name] = n
	}
	// Kahn's algorithm: a node's depth is final once all its parents are.
	waiting := make(map[string]int, len(nodes))
	var ready []string
	for name, n := range nodes {
		if waiting[name] = len(n.Parents); waiting[name] == 0 {
			ready = append(ready, name)
		}
	}
	for len(ready) > 0 {
		p := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		for _, c := range children[p] {
			nodes[c].Depth = max(nodes[c].Depth, nodes[p].Depth+1)
			if waiting[c]--; waiting[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	out := make([]WorkflowNode, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Depth != out[j].Depth {
			return out[i].Depth < out[j].Depth
		}
		return nameLess(out[i].Name, out[j].Name)
	})
	return out
}

// nameLess orders node names: numbers by value, before other names, which
// go by bytes.
func nameLess(a, b string) bool {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return x < y || x == y && a < b
	case errA == nil || errB == nil:
		return errA == nil
	}
	return a < b
}
