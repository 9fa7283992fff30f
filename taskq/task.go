package taskq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// Defaults applied at enqueue time.
const (
	DefaultQueue      = "default"
	DefaultTenant     = "default"
	DefaultMaxRetries = 25
	MaxPriority       = 255
)

// Sentinel errors.
var (
	// SkipRetry, returned (or wrapped) by a handler, sends the task to the
	// dead-letter set at once instead of retrying it.
	//lint:ignore ST1012 it reads as an instruction ("return SkipRetry"), the name asynq users know
	SkipRetry = errors.New("taskq: skip retry")
	// ErrDuplicateTask is returned by Enqueue when the task id exists.
	ErrDuplicateTask = errors.New("taskq: task id already exists")
	// ErrDuplicate is matched (errors.Is) by the *DuplicateError Enqueue
	// returns for a unique task whose key another task holds.
	ErrDuplicate = errors.New("taskq: duplicate of a unique task")
	// ErrInvalidTask is returned for a task that cannot be enqueued.
	ErrInvalidTask = errors.New("taskq: invalid task")
	// ErrRedisUnreachable is wrapped by NewWorker and NewClient when the
	// first connection to Redis fails (refused, timed out, or its handshake
	// failed): an outage worth waiting out, as opposed to a bad
	// configuration (an address that does not parse, a bad queue name),
	// which is returned without it. Test it with errors.Is.
	ErrRedisUnreachable = rdb.ErrUnreachable
	// ErrNotReplicated is wrapped by an enqueue of a Client with
	// WaitReplicas when Redis added the task but fewer replicas than asked
	// acknowledged it in time: a failover now could lose it (and it may
	// still run; enqueue it again only if a duplicate is acceptable).
	ErrNotReplicated = rdb.ErrNotReplicated
)

// Task is a unit of work: a type naming its handler and an opaque payload.
// A worker hands handlers a Task with its queue, tenant, id and attempt.
type Task struct {
	Type    string
	Payload []byte
	// Headers travel with the task from the enqueue to the handler: trace
	// context, a request id, the caller's identity. Set them before
	// Enqueue (or with the Header option, or in enqueue middleware); at
	// most 64 KiB in all.
	Headers map[string]string

	opts []Option

	// Set on tasks a worker hands to a handler.
	id, queue, tenant string
	retried, max      int
	result            []byte
	run               *runInfo
	// workflow and parents: a workflow node's (workflow.go).
	workflow string
	parents  []string
	// batch and group: a batch task's members and group (group.go).
	batch []*Task
	group string
}

// runInfo is what a handler can learn about the attempt it runs: the
// worker, the task's times, its lease.
type runInfo struct {
	workerID, host string
	starts         int
	enqueuedAt     time.Time
	lease          *atomic.Int64 // Unix ms; the lease keeper moves it on every heartbeat
	progress       func(ctx context.Context, value string) error
	results        func(ctx context.Context, ids []string) (map[string][]byte, error)
}

// NewTask returns a task of type typ; opts are applied at enqueue.
func NewTask(typ string, payload []byte, opts ...Option) *Task {
	return &Task{Type: typ, Payload: payload, opts: opts}
}

// ID is the task's id (set for tasks handed to a handler).
func (t *Task) ID() string { return t.id }

// WorkerID is the id of the worker running the task ("" outside a handler).
func (t *Task) WorkerID() string { return t.runField().workerID }

// Host is the host name of the worker running the task.
func (t *Task) Host() string { return t.runField().host }

// Attempt is which attempt this is: 1 for the first, Retried()+1 after
// failures.
func (t *Task) Attempt() int { return t.retried + 1 }

// Starts counts the task's starts, this one included; more than Attempt()
// means a re-delivery after a lost lease (at-least-once).
func (t *Task) Starts() int { return t.runField().starts }

// EnqueuedAt is when the task was enqueued (zero for a task from a release
// that did not record it).
func (t *Task) EnqueuedAt() time.Time { return t.runField().enqueuedAt }

// LeaseDeadline is when the worker's lease on the task ends unless the next
// heartbeat extends it (heartbeats run every HeartbeatInterval).
func (t *Task) LeaseDeadline() time.Time {
	if r := t.runField(); r.lease != nil {
		return time.UnixMilli(r.lease.Load())
	}
	return time.Time{}
}

func (t *Task) runField() runInfo {
	if t.run == nil {
		return runInfo{}
	}
	return *t.run
}

// Queue is the task's queue.
func (t *Task) Queue() string { return t.queue }

// Tenant is the task's fairness key.
func (t *Task) Tenant() string { return t.tenant }

// Retried is how many times the task failed before this attempt.
func (t *Task) Retried() int { return t.retried }

// MaxRetries is the task's retry budget.
func (t *Task) MaxRetries() int { return t.max }

// SetResult stores b as the task's result; it is kept in Redis for the
// task's Retention when the handler succeeds.
func (t *Task) SetResult(b []byte) { t.result = append([]byte(nil), b...) }

// Result returns what the handler stored with SetResult.
func (t *Task) Result() []byte { return t.result }

// Option configures a task at enqueue.
type Option func(*options)

type options struct {
	queue, tenant, id string
	weight            float64
	priority          int
	maxRetries        int
	timeout           time.Duration
	deadline          time.Time
	processAt         time.Time
	processIn         time.Duration
	retention         time.Duration
	uniqueKey         string
	uniqueFor         time.Duration // Unique's window
	debounce          time.Duration // Debounce's delay
	headers           map[string]string
	workflow          string   // a workflow node's (workflow.go)
	parents           []string // its parents' task ids
	group             string   // its aggregation group (group.go)
	groupPolicy       GroupPolicy
}

// Queue puts the task into queue q (default "default").
func Queue(q string) Option { return func(o *options) { o.queue = q } }

// Tenant sets the fairness key (default "default").
func Tenant(t string) Option { return func(o *options) { o.tenant = t } }

// Weight sets the tenant's weight in its queue (default 1; 0 leaves it as
// is), MinWeight to MaxWeight.
func Weight(w float64) Option { return func(o *options) { o.weight = w } }

// MinWeight and MaxWeight bound a weight (an enqueue's or a limit's): a
// tenant's virtual time advances by 1/weight a task, and the tree keeps it
// in a fixed-width key that a weight of 1e-12 would overflow within days.
const (
	MinWeight = 0.001
	MaxWeight = 1e6
)

// checkWeight checks a weight given to an enqueue or a limit (0: none).
func checkWeight(w float64) error {
	if w == 0 {
		return nil
	}
	if !(w >= MinWeight && w <= MaxWeight) { // NaN fails both
		return fmt.Errorf("%w: weight %g, want %g to %g (0: leave it as is)", ErrInvalidTask, w, MinWeight, MaxWeight)
	}
	return nil
}

// Priority orders the task before lower ones of the same tenant (0..255, default 0).
func Priority(p int) Option { return func(o *options) { o.priority = p } }

// MaxRetries sets how many times a failed task is retried (default 25).
func MaxRetries(n int) Option { return func(o *options) { o.maxRetries = n } }

// Timeout bounds one attempt (default: the worker's DefaultTimeout).
func Timeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Deadline ends every attempt at t at the latest (with Timeout, whichever
// comes first); an attempt started after t fails at once and is retried or
// dead-lettered like any failure.
func Deadline(t time.Time) Option { return func(o *options) { o.deadline = t } }

// ProcessIn delays the task by d.
func ProcessIn(d time.Duration) Option { return func(o *options) { o.processIn = d } }

// ProcessAt delays the task until t.
func ProcessAt(t time.Time) Option { return func(o *options) { o.processAt = t } }

// Retention keeps the completed task and its result for d (default 0: deleted at once).
func Retention(d time.Duration) Option { return func(o *options) { o.retention = d } }

// Unique makes the task hold key for window from its enqueue: while it
// holds it — the task pending, running, or already done — another enqueue
// with the same key in the same queue is refused with a *DuplicateError
// naming this task. After the window the key is free again.
func Unique(key string, window time.Duration) Option {
	return func(o *options) { o.uniqueKey, o.uniqueFor, o.debounce = key, window, 0 }
}

// Debounce delays the task by d and makes it replace the task of the same
// key (in the same queue) that is still waiting for its own delay: a burst
// of enqueues within d of each other runs once, d after the last one, with
// the last one's payload. A task already due or running is not replaced:
// the enqueue adds a new one.
func Debounce(key string, d time.Duration) Option {
	return func(o *options) { o.uniqueKey, o.debounce, o.uniqueFor = key, d, 0 }
}

// DuplicateError is Enqueue's refusal of a unique task: the task ID holds
// Key.
type DuplicateError struct {
	Key, Queue, ID string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("taskq: unique key %q of queue %q is held by task %s", e.Key, e.Queue, e.ID)
}

// Is makes errors.Is(err, ErrDuplicate) true.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// TaskID sets the task's id (default: random); enqueueing an existing id fails.
func TaskID(id string) Option { return func(o *options) { o.id = id } }

// message is the task as stored in Redis: message.go encodes it (format
// 1); this struct is also format 0, the JSON of earlier releases. The
// tenant is not in it:
// it travels once, in the task's Redis member (pending order, fairness),
// and comes back with the dequeue. Messages written by earlier releases
// carry a "tenant" field; it is read only if the member gave none.
type message struct {
	ID          string            `json:"id"`
	Type        string            `json:"type"`
	Payload     []byte            `json:"payload,omitempty"`
	Queue       string            `json:"queue"`
	Tenant      string            `json:"tenant,omitempty"`
	MaxRetries  int               `json:"max_retries"`
	TimeoutMS   int64             `json:"timeout_ms,omitempty"`
	RetentionMS int64             `json:"retention_ms,omitempty"`
	DeadlineMS  int64             `json:"deadline_ms,omitempty"` // unix ms
	EnqueuedAt  int64             `json:"enqueued_at"`           // unix ms
	Headers     map[string]string `json:"headers,omitempty"`
	Workflow    string            `json:"workflow,omitempty"` // a workflow node's
	Parents     []string          `json:"parents,omitempty"`  // its parents' task ids
	Batch       []string          `json:"batch,omitempty"`    // a batch task's members (group.lua)
	Group       string            `json:"group,omitempty"`    // and their group
}

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func checkName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidTask, field)
	}
	if len(s) > 256 || strings.ContainsAny(s, "\x00\x01{}") {
		return fmt.Errorf("%w: %s %q must be at most 256 bytes without NUL, \\x01, '{' or '}'", ErrInvalidTask, field, s)
	}
	return nil
}

// validationError is why a dequeued message cannot run.
type validationError struct{ reason string }

func (e *validationError) Error() string { return e.reason }

// decodeMessage parses and checks a stored message (message.go) of task id
// in queue; a failure says why.
func decodeMessage(id, queue string, b []byte) (*message, error) {
	if len(b) == 0 {
		return nil, &validationError{"malformed task: message missing"}
	}
	m, legacy, err := parseMessage(b)
	if err != nil {
		return nil, &validationError{"malformed task: " + err.Error()}
	}
	switch {
	case m.Type == "":
		return nil, &validationError{"malformed task: missing field \"type\""}
	case legacy && m.ID != id:
		return nil, &validationError{fmt.Sprintf("malformed task: field \"id\" is %q, stored under %q", m.ID, id)}
	case legacy && m.Queue != queue:
		return nil, &validationError{fmt.Sprintf("malformed task: field \"queue\" is %q, stored in %q", m.Queue, queue)}
	case m.MaxRetries < 0:
		return nil, &validationError{"malformed task: field \"max_retries\" is negative"}
	case m.TimeoutMS < 0 || m.RetentionMS < 0:
		return nil, &validationError{"malformed task: negative timeout_ms or retention_ms"}
	}
	m.ID, m.Queue = id, queue
	return m, nil
}

// HandlerFunc runs one task. Returning nil completes it; an error retries
// it (or dead-letters it when wrapping SkipRetry or out of retries). It
// must return soon after ctx ends.
type HandlerFunc func(ctx context.Context, t *Task) error
