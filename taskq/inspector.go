package taskq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// Task states, as the inspector lists them.
const (
	StatePending   = "pending"   // waiting to be dequeued
	StateScheduled = "scheduled" // waiting for its due time
	StateActive    = "active"    // leased by a worker, its handler running
	StateRetry     = "retry"     // failed, waiting for its next attempt
	StateDead      = "dead"      // out of retries (or never runnable): the dead letters
	StateCompleted = "completed" // succeeded and kept for its Retention
	StateCancelled = "cancelled" // cancelled by an operator; never runs again
	// StateWaiting: a workflow node waiting for its parents (held in
	// scheduled, at a due time no clock reaches: waitingAt).
	StateWaiting = "waiting"
)

// waitingAt is the due time of a waiting workflow node (lib.lua WAITING).
var waitingAt = time.UnixMilli(9e15)

// ErrTaskNotFound is returned for an id no queue holds.
var ErrTaskNotFound = errors.New("taskq: task not found")

// ErrBadListing is returned by List for a state it does not know, a cursor
// that no page of this listing gave, or a negative limit.
var ErrBadListing = errors.New("taskq: bad listing")

// ErrTaskState is returned when a task's state does not allow the operation
// (delete an active task, run a pending one, cancel a completed one).
var ErrTaskState = errors.New("taskq: not in a state that allows this")

// Inspector reads and steers tasks and queues: list by state, get, delete,
// run now, cancel, pause and resume. It is safe for concurrent use.
type Inspector struct {
	r *rdb.RDB
}

// NewInspector connects to Redis (the same address forms as ClientConfig).
func NewInspector(redis string) (*Inspector, error) {
	if redis == "" {
		return nil, errors.New("taskq: NewInspector: empty Redis address")
	}
	r, err := rdb.Open(redis)
	if err != nil {
		return nil, err
	}
	return &Inspector{r: r}, nil
}

// Close releases the connections.
func (i *Inspector) Close() { i.r.Close() }

// Queues lists the names of the queues Redis knows, in order.
func (i *Inspector) Queues(ctx context.Context) ([]string, error) {
	qs, err := i.r.Queues(ctx)
	slices.Sort(qs)
	return qs, err
}

// TaskDetail is one task as the inspector shows it.
type TaskDetail struct {
	ID          string            `json:"id"`
	Queue       string            `json:"queue"`
	Tenant      string            `json:"tenant"`
	Type        string            `json:"type"`
	State       string            `json:"state"`
	Payload     json.RawMessage   `json:"payload,omitempty"`
	Retried     int               `json:"retried"`
	Starts      int               `json:"starts"`            // failed attempts + runs lost or cancelled + the run now (active) or the last (dead)
	Snoozes     int               `json:"snoozes,omitempty"` // times its handler snoozed it (no attempt counted)
	MaxRetries  int               `json:"max_retries"`
	LastError   string            `json:"last_error,omitempty"`
	DeadReason  string            `json:"dead_reason,omitempty"`
	EnqueuedAt  time.Time         `json:"enqueued_at"`
	DueAt       *time.Time        `json:"due_at,omitempty"`      // scheduled, retry
	LeaseUntil  *time.Time        `json:"lease_until,omitempty"` // active
	EndedAt     *time.Time        `json:"ended_at,omitempty"`    // dead: died; cancelled: cancelled
	KeptUntil   *time.Time        `json:"kept_until,omitempty"`  // completed
	CancelledBy string            `json:"cancelled_by,omitempty"`
	Result      []byte            `json:"result,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Progress    *Progress         `json:"progress,omitempty"` // the handler's last report
	Workflow    string            `json:"workflow,omitempty"` // a workflow node's workflow
	Parents     []string          `json:"parents,omitempty"`  // and the task ids it runs after
}

func detail(raw rdb.Raw) TaskDetail {
	d := TaskDetail{ID: raw.ID, Queue: raw.Queue, State: raw.State, Retried: raw.Retried, Starts: raw.Retried + raw.Lost, Snoozes: raw.Snoozes,
		LastError: raw.LastError, DeadReason: raw.DeadReason, CancelledBy: raw.CancelledBy, Result: raw.Result,
		Tenant: rdb.TenantOf(raw.Member)}
	if raw.State == "active" || raw.State == "dead" || raw.State == "completed" {
		d.Starts++ // the run now, the one that failed last or the one that succeeded (not in Retried)
	}
	d.fromMessage(raw.Msg)
	if raw.Progress != "" {
		var p Progress
		if json.Unmarshal([]byte(raw.Progress), &p) == nil {
			d.Progress = &p
		}
	}
	d.times(raw)
	return d
}

// fromMessage fills what the stored message holds.
func (d *TaskDetail) fromMessage(msg []byte) {
	m, _, err := parseMessage(msg)
	if err != nil {
		return
	}
	d.Type, d.MaxRetries, d.Headers, d.Workflow, d.Parents = m.Type, m.MaxRetries, m.Headers, m.Workflow, m.Parents
	if len(m.Payload) > 0 {
		if json.Valid(m.Payload) {
			d.Payload = m.Payload
		} else {
			d.Payload, _ = json.Marshal(m.Payload) // not JSON: base64, as a JSON string
		}
	}
	if m.EnqueuedAt > 0 {
		d.EnqueuedAt = time.UnixMilli(m.EnqueuedAt)
	}
	if d.Tenant == "" {
		d.Tenant = m.Tenant
	}
}

// times fills the time raw's state names: due, ended, kept, lease.
func (d *TaskDetail) times(raw rdb.Raw) {
	at := func() *time.Time { t := raw.At; return &t }
	switch raw.State {
	case StateScheduled, StateRetry:
		if d.DueAt = at(); raw.State == StateScheduled && !raw.At.Before(waitingAt) {
			d.State, d.DueAt = StateWaiting, nil
		}
	case StateDead:
		d.EndedAt = at()
	case StateCompleted:
		d.KeptUntil = at()
	case StateCancelled:
		d.EndedAt = at()
	case StateActive:
		if !raw.LeaseUntil.IsZero() {
			t := raw.LeaseUntil
			d.LeaseUntil = &t
		}
	}
}

// ListOptions select a page of tasks.
type ListOptions struct {
	Tenant string // "" = every tenant
	Limit  int    // default 100
	Cursor string // from the previous page's Next; "" = the first page
}

// TaskPage is one page of a listing; Next is "" on the last one.
type TaskPage struct {
	Tasks []TaskDetail `json:"tasks"`
	Next  string       `json:"next,omitempty"`
}

// List returns one page of queue's tasks in state. A page costs O(log n +
// limit) Redis work however long the queue is (pending in dequeue order
// within each tenant; scheduled and retry by due time; dead, completed and
// cancelled newest first).
func (i *Inspector) List(ctx context.Context, queue, state string, o ListOptions) (TaskPage, error) {
	if err := checkName("queue", queue); err != nil {
		return TaskPage{}, err
	}
	if !slices.Contains(rdb.States, state) {
		return TaskPage{}, fmt.Errorf("%w: state %q: want one of %s", ErrBadListing, state, strings.Join(rdb.States, ", "))
	}
	if o.Limit < 0 {
		return TaskPage{}, fmt.Errorf("%w: limit %d: want a positive number (0: 100)", ErrBadListing, o.Limit)
	}
	p, err := i.r.List(ctx, queue, state, o.Tenant, o.Limit, o.Cursor)
	if errors.Is(err, rdb.ErrBadCursor) {
		return TaskPage{}, fmt.Errorf("%w: %v (a cursor is the \"next\" of the page before, for the same queue, state and tenant)", ErrBadListing, err)
	}
	if err != nil {
		return TaskPage{}, err
	}
	out := TaskPage{Tasks: make([]TaskDetail, 0, len(p.Tasks)), Next: p.Next}
	for _, raw := range p.Tasks {
		out.Tasks = append(out.Tasks, detail(raw))
	}
	return out, nil
}

// Get finds task id in queue ("" = look in every known queue).
func (i *Inspector) Get(ctx context.Context, queue, id string) (TaskDetail, error) {
	raw, err := i.find(ctx, queue, id)
	if err != nil {
		return TaskDetail{}, err
	}
	return detail(raw), nil
}

func (i *Inspector) find(ctx context.Context, queue, id string) (rdb.Raw, error) {
	queues := []string{queue}
	if queue == "" {
		qs, err := i.r.Queues(ctx)
		if err != nil {
			return rdb.Raw{}, err
		}
		queues = qs
	}
	for _, q := range queues {
		raw, err := i.r.Get(ctx, q, id)
		if err != nil {
			return rdb.Raw{}, err
		}
		if raw.State != "" {
			return raw, nil
		}
	}
	return rdb.Raw{}, fmt.Errorf("%w: %q", ErrTaskNotFound, id)
}

// Delete removes a task that is not running from wherever it waits,
// leaving nothing behind; an active task is ErrTaskState (cancel it).
func (i *Inspector) Delete(ctx context.Context, queue, id string) (TaskDetail, error) {
	return i.op(ctx, queue, id, "delete", "an active task cannot be deleted: cancel it first")
}

// Run makes a scheduled, retry, dead or cancelled task pending now (a dead
// or cancelled one starts over); other states are ErrTaskState.
func (i *Inspector) Run(ctx context.Context, queue, id string) (TaskDetail, error) {
	return i.op(ctx, queue, id, "run", "only a scheduled, retry, dead or cancelled task can be run now")
}

func (i *Inspector) op(ctx context.Context, queue, id, op, refusal string) (TaskDetail, error) {
	raw, err := i.find(ctx, queue, id)
	if err != nil {
		return TaskDetail{}, err
	}
	state, acted, err := i.r.TaskOp(ctx, raw.Queue, op, id)
	if err != nil {
		return TaskDetail{}, err
	}
	d := detail(raw)
	d.State = state
	if !acted {
		return d, fmt.Errorf("%w: task %s is %s; %s", ErrTaskState, id, state, refusal)
	}
	return d, nil
}

// Cancel cancels a task: a pending, scheduled or retrying one never runs;
// an active one loses its lease at once and the worker running it cancels
// its handler's context (within a second: a published message, and the next
// heartbeat if the message is missed); it is never retried. who is recorded
// with the time. Dead, completed and cancelled tasks are ErrTaskState.
func (i *Inspector) Cancel(ctx context.Context, queue, id, who string) (TaskDetail, error) {
	raw, err := i.find(ctx, queue, id)
	if err != nil {
		return TaskDetail{}, err
	}
	state, err := i.r.Cancel(ctx, raw.Queue, id, who, time.Now())
	if err != nil {
		return TaskDetail{}, err
	}
	d := detail(raw)
	switch state {
	case StatePending, StateScheduled, StateRetry, StateActive:
		d.State, d.CancelledBy = StateCancelled, who
		return d, nil
	}
	d.State = state
	return d, fmt.Errorf("%w: task %s is %s; only a pending, scheduled, retry or active task can be cancelled", ErrTaskState, id, state)
}

// Pause stops dequeuing from queue, or from one tenant of it ("" = the
// whole queue), for d (0 = until Resume). Enqueue still succeeds; the tasks
// wait.
func (i *Inspector) Pause(ctx context.Context, queue, tenant string, d time.Duration) error {
	if err := checkName("queue", queue); err != nil {
		return err
	}
	if err := checkPausedTenant(tenant); err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("taskq: pause for %v: want a positive duration, or 0 for until resumed", d)
	}
	until := rdb.Forever
	if d > 0 {
		until = time.Now().Add(d)
	}
	if err := i.r.RegisterQueues(ctx, queue); err != nil {
		return err
	}
	return i.r.Pause(ctx, queue, tenant, until)
}

// Resume ends a pause of queue or of one tenant of it.
func (i *Inspector) Resume(ctx context.Context, queue, tenant string) error {
	if err := checkName("queue", queue); err != nil {
		return err
	}
	if err := checkPausedTenant(tenant); err != nil {
		return err
	}
	return i.r.Resume(ctx, queue, tenant)
}

// checkPausedTenant checks a tenant to pause or resume ("" = the whole
// queue): a tenant as enqueues name it, a leaf of the tree, never an inner
// node (acme/): pause the tenants below it.
func checkPausedTenant(tenant string) error {
	if tenant == "" {
		return nil
	}
	if strings.HasSuffix(tenant, "/") {
		return fmt.Errorf("%w: tenant %q is an inner node of the tenant tree: pause the tenants below it", ErrInvalidTask, tenant)
	}
	return checkTenant("tenant", tenant)
}
