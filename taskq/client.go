package taskq

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Redis is "host:port", "redis://host:port/db", comma-separated
	// cluster seeds, or "redis-sentinel://[user:pass@]host:port,host:port/MASTER[?db=N]"
	// (the sentinels watching master set MASTER; the client follows the
	// master they name across a failover). Required.
	Redis string
	// WaitReplicas makes each enqueue wait until this many replicas have
	// the task (Redis WAIT) before it returns, and fail with
	// ErrNotReplicated if they do not within ReplicaTimeout. Redis
	// replicates asynchronously, so without it a task the master
	// acknowledged can be lost when a failover promotes a replica that had
	// not received it yet. It covers a master that fails (crashes, is
	// killed): keep two replicas or more, or enqueues fail while the one
	// left after a failover is the master. It does not make Redis
	// consistent: in a failover while the old master still serves (asked
	// of Sentinel, a network partition) another replica may acknowledge
	// an enqueue to the old master before it resyncs from the promoted one,
	// and that enqueue is lost. 0 (the default): do not wait. Not on a
	// cluster.
	WaitReplicas int
	// ReplicaTimeout bounds the wait of WaitReplicas (default 1s).
	ReplicaTimeout time.Duration
}

// Client enqueues tasks and inspects queues.
type Client struct {
	r *rdb.RDB

	// mu protects registered.
	mu         sync.Mutex
	registered map[string]bool

	middleware []EnqueueMiddleware // set by Use before the client is shared
}

// NewClient connects to Redis.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Redis == "" {
		return nil, fmt.Errorf("taskq: ClientConfig.Redis is empty (want host:port, redis://… or redis-sentinel://…)")
	}
	r, err := rdb.Open(cfg.Redis)
	if err != nil {
		return nil, err
	}
	if cfg.ReplicaTimeout <= 0 {
		cfg.ReplicaTimeout = time.Second
	}
	if err := r.WaitReplicas(cfg.WaitReplicas, cfg.ReplicaTimeout); err != nil {
		r.Close()
		return nil, fmt.Errorf("taskq: ClientConfig.WaitReplicas: %w", err)
	}
	return &Client{r: r, registered: map[string]bool{}}, nil
}

// Close releases the connections.
func (c *Client) Close() { c.r.Close() }

// TaskInfo describes an enqueued task.
type TaskInfo struct {
	ID, Queue, Tenant string
	Due               time.Time // zero when pending at once
	// Replaced is the task a Debounce enqueue replaced ("" if none).
	Replaced string
}

type prepared struct {
	queue string
	msg   rdb.EnqMsg
	info  *TaskInfo
	o     options
}

func prepare(t *Task, now time.Time, extra []Option) (prepared, error) {
	o := options{queue: DefaultQueue, tenant: DefaultTenant, maxRetries: DefaultMaxRetries}
	for _, f := range t.opts {
		f(&o)
	}
	for _, f := range extra {
		f(&o)
	}
	if o.id == "" {
		o.id = newID()
	}
	if err := checkOptions(t, o); err != nil {
		return prepared{}, err
	}
	headers := t.Headers
	if len(o.headers) > 0 {
		headers = maps.Clone(t.Headers)
		if headers == nil {
			headers = map[string]string{}
		}
		maps.Copy(headers, o.headers)
	}
	if err := checkHeaders(headers); err != nil {
		return prepared{}, err
	}
	due := o.processAt
	if o.processIn > 0 {
		due = now.Add(o.processIn)
	}
	if o.debounce > 0 {
		due = now.Add(o.debounce)
	}
	if !due.After(now) {
		due = time.Time{}
	}
	b, err := encodeMessage(&message{
		ID: o.id, Type: t.Type, Payload: t.Payload, Queue: o.queue,
		MaxRetries: o.maxRetries, TimeoutMS: o.timeout.Milliseconds(), RetentionMS: o.retention.Milliseconds(),
		DeadlineMS: deadlineMS(o.deadline),
		EnqueuedAt: now.UnixMilli(), Headers: headers, Workflow: o.workflow, Parents: o.parents,
	})
	if err != nil {
		return prepared{}, err
	}
	return prepared{
		queue: o.queue,
		msg:   rdb.EnqMsg{ID: o.id, Msg: string(b), Tenant: o.tenant, Weight: o.weight, Priority: o.priority, Due: due},
		info:  &TaskInfo{ID: o.id, Queue: o.queue, Tenant: o.tenant, Due: due},
		o:     o,
	}, nil
}

// checkOptions checks a task's names and options.
func checkOptions(t *Task, o options) error {
	for _, c := range []struct{ f, v string }{{"queue", o.queue}, {"task id", o.id}, {"type", t.Type}} {
		if err := checkName(c.f, c.v); err != nil {
			return err
		}
	}
	if err := checkTenant("tenant", o.tenant); err != nil {
		return err
	}
	switch {
	case o.priority < 0 || o.priority > MaxPriority:
		return fmt.Errorf("%w: priority %d, want 0..%d", ErrInvalidTask, o.priority, MaxPriority)
	case o.maxRetries < 0:
		return fmt.Errorf("%w: max retries %d, want >= 0", ErrInvalidTask, o.maxRetries)
	case o.timeout < 0 || o.retention < 0:
		return fmt.Errorf("%w: negative timeout or retention", ErrInvalidTask)
	}
	if err := checkWeight(o.weight); err != nil {
		return err
	}
	return checkUnique(o)
}

// checkUnique checks Unique's and Debounce's arguments.
func checkUnique(o options) error {
	switch {
	case o.uniqueKey == "":
		return nil
	case len(o.uniqueKey) > 1024:
		return fmt.Errorf("%w: unique key of %d bytes, at most 1024", ErrInvalidTask, len(o.uniqueKey))
	case o.uniqueFor <= 0 && o.debounce <= 0:
		return fmt.Errorf("%w: unique key %q needs a positive window (Unique) or delay (Debounce)", ErrInvalidTask, o.uniqueKey)
	case o.debounce > 0 && (!o.processAt.IsZero() || o.processIn > 0):
		return fmt.Errorf("%w: Debounce sets the task's delay; drop ProcessAt/ProcessIn", ErrInvalidTask)
	}
	return nil
}

func (c *Client) register(ctx context.Context, q string) error {
	c.mu.Lock()
	done := c.registered[q]
	c.mu.Unlock()
	if done {
		return nil
	}
	if err := c.r.RegisterQueues(ctx, q); err != nil {
		return fmt.Errorf("taskq: register queue %q: %w", q, err)
	}
	c.mu.Lock()
	c.registered[q] = true
	c.mu.Unlock()
	return nil
}

// Enqueue adds t; when Enqueue returns nil the task is in Redis (durable as
// far as Redis's persistence setting makes it: see the README).
func (c *Client) Enqueue(ctx context.Context, t *Task, opts ...Option) (*TaskInfo, error) {
	if len(c.middleware) > 0 {
		return c.chain(c.enqueue)(ctx, t, opts...)
	}
	return c.enqueue(ctx, t, opts...)
}

func (c *Client) enqueue(ctx context.Context, t *Task, opts ...Option) (*TaskInfo, error) {
	p, err := prepare(t, time.Now(), opts)
	if err != nil {
		return nil, err
	}
	if err := c.register(ctx, p.queue); err != nil {
		return nil, err
	}
	if p.o.group != "" {
		return c.enqueueGrouped(ctx, p)
	}
	if p.o.uniqueKey != "" {
		return c.enqueueUnique(ctx, p)
	}
	n, err := c.r.Enqueue(ctx, p.queue, time.Now(), []rdb.EnqMsg{p.msg})
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %s", ErrDuplicateTask, p.info.ID)
	}
	return p.info, nil
}

// enqueueUnique adds a task that holds a unique key (or debounces).
func (c *Client) enqueueUnique(ctx context.Context, p prepared) (*TaskInfo, error) {
	now := time.Now()
	mode, hold := rdb.ModeUnique, now.Add(p.o.uniqueFor)
	if p.o.debounce > 0 {
		mode, hold = rdb.ModeDebounce, p.msg.Due
	}
	added, holder, replaced, err := c.r.EnqueueUnique(ctx, p.queue, now, mode, p.o.uniqueKey, hold, p.msg)
	switch {
	case err != nil:
		return nil, err
	case !added && holder == p.info.ID:
		return nil, fmt.Errorf("%w: %s", ErrDuplicateTask, p.info.ID)
	case !added:
		return nil, &DuplicateError{Key: p.o.uniqueKey, Queue: p.queue, ID: holder}
	}
	p.info.Replaced = replaced
	return p.info, nil
}

// EnqueueBatch adds many tasks with one script call per queue (and per 500
// tasks). Tasks whose id already exists are skipped; the infos returned are
// those of the tasks given, in order.
func (c *Client) EnqueueBatch(ctx context.Context, tasks []*Task, opts ...Option) ([]*TaskInfo, error) {
	now := time.Now()
	byQueue := map[string][]rdb.EnqMsg{}
	var order []string
	infos := make([]*TaskInfo, len(tasks))
	// collect is the end of the enqueue middleware chain for a batch: it
	// prepares the task into the batch.
	collect := func(_ context.Context, t *Task, opts ...Option) (*TaskInfo, error) {
		p, err := prepare(t, now, opts)
		if err != nil {
			return nil, err
		}
		if p.o.uniqueKey != "" || p.o.group != "" {
			return nil, fmt.Errorf("%w: Unique, Debounce and Group need Enqueue, one task at a time", ErrInvalidTask)
		}
		if _, ok := byQueue[p.queue]; !ok {
			order = append(order, p.queue)
		}
		byQueue[p.queue] = append(byQueue[p.queue], p.msg)
		return p.info, nil
	}
	add := c.chain(collect)
	for i, t := range tasks {
		info, err := add(ctx, t, opts...)
		if err != nil {
			return nil, fmt.Errorf("task %d: %w", i, err)
		}
		infos[i] = info
	}
	for _, q := range order {
		if err := c.register(ctx, q); err != nil {
			return nil, err
		}
		msgs := byQueue[q]
		for len(msgs) > 0 {
			n := min(len(msgs), 500)
			if _, err := c.r.Enqueue(ctx, q, time.Now(), msgs[:n]); err != nil {
				return nil, err
			}
			msgs = msgs[n:]
		}
	}
	return infos, nil
}

// Result returns the stored result of a completed task (nil if none or expired).
func (c *Client) Result(ctx context.Context, queue, id string) ([]byte, error) {
	return c.r.Result(ctx, queue, id)
}

// DeadTask is one entry of a queue's dead-letter set.
type DeadTask struct {
	ID        string    `json:"id"`
	Type      string    `json:"type,omitempty"`
	Tenant    string    `json:"tenant,omitempty"`
	Reason    string    `json:"reason"`
	LastError string    `json:"last_error,omitempty"`
	DiedAt    time.Time `json:"died_at"`
	Message   string    `json:"message,omitempty"` // the raw stored message when it is not valid
}

// DeadLetters lists up to limit dead tasks of queue, oldest first.
func (c *Client) DeadLetters(ctx context.Context, queue string, limit int) ([]DeadTask, error) {
	if limit <= 0 {
		limit = 100
	}
	raw, err := c.r.DeadList(ctx, queue, limit)
	if err != nil {
		return nil, err
	}
	out := make([]DeadTask, len(raw))
	for i, d := range raw {
		out[i] = DeadTask{ID: d.ID, Tenant: d.Tenant, Reason: d.Reason, LastError: d.LastError, DiedAt: d.DiedAt}
		if m, _, err := parseMessage(d.Msg); err == nil && m.Type != "" {
			out[i].Type = m.Type
			if out[i].Tenant == "" {
				out[i].Tenant = m.Tenant
			}
		} else {
			out[i].Message = string(d.Msg)
		}
	}
	return out, nil
}

// RequeueDead puts dead tasks of queue back to pending with a fresh retry
// budget; no ids means all. It returns how many moved.
func (c *Client) RequeueDead(ctx context.Context, queue string, ids ...string) (int, error) {
	return c.r.DLQ(ctx, queue, "requeue", ids)
}

// DeleteDead deletes dead tasks of queue; no ids means all.
func (c *Client) DeleteDead(ctx context.Context, queue string, ids ...string) (int, error) {
	return c.r.DLQ(ctx, queue, "delete", ids)
}

// Purge deletes queue q and everything in it (pending, running, dead,
// counters) and forgets its name. Workers holding its tasks will find their
// leases gone.
func (c *Client) Purge(ctx context.Context, q string) error {
	return c.r.Purge(ctx, q)
}

func deadlineMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
