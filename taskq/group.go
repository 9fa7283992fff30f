package taskq

import (
	"context"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// Aggregation: tasks enqueued with Group(key, policy) are not run one by
// one but handed to one handler call as a batch — a task of their type
// whose Batch() holds them — once the group reaches policy.MaxSize members,
// policy.Grace has passed since the last one joined, or policy.MaxDelay
// since the first, whichever comes first. Joining the group and making the
// batch are each one Redis call (group.lua, maintain.lua), so a member is
// in exactly one batch; the batch task itself is a task like any other
// (leases, retries: at least once), and the members' records go when it
// succeeds.

// GroupPolicy is when a group is handed over; zero fields take the
// defaults (DefaultGroupPolicy). The first member's policy holds for its
// group.
type GroupPolicy struct {
	MaxSize         int
	Grace, MaxDelay time.Duration
}

// DefaultGroupPolicy is 100 members, 1 s of grace, 10 s at most.
var DefaultGroupPolicy = GroupPolicy{MaxSize: 100, Grace: time.Second, MaxDelay: 10 * time.Second}

// MaxGroupSize bounds a group.
const MaxGroupSize = 10000

// Group puts the task into aggregation group key of its queue, handed over
// as a batch per p.
func Group(key string, p GroupPolicy) Option {
	return func(o *options) {
		o.group = key
		o.groupPolicy = p
	}
}

func (p GroupPolicy) withDefaults() GroupPolicy {
	if p.MaxSize <= 0 {
		p.MaxSize = DefaultGroupPolicy.MaxSize
	}
	if p.Grace <= 0 {
		p.Grace = DefaultGroupPolicy.Grace
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultGroupPolicy.MaxDelay
	}
	return p
}

// enqueueGrouped adds a prepared task to its group.
func (c *Client) enqueueGrouped(ctx context.Context, p prepared) (*TaskInfo, error) {
	if p.o.uniqueKey != "" || !p.msg.Due.IsZero() {
		return nil, fmt.Errorf("%w: a grouped task is neither unique nor scheduled", ErrInvalidTask)
	}
	if err := checkName("group", p.o.group); err != nil {
		return nil, err
	}
	gp := p.o.groupPolicy.withDefaults()
	if gp.MaxSize > MaxGroupSize {
		return nil, fmt.Errorf("%w: group max size %d, at most %d", ErrInvalidTask, gp.MaxSize, MaxGroupSize)
	}
	n, err := c.r.EnqueueGroup(ctx, p.queue, time.Now(), p.msg, p.o.group, rdb.GroupPolicy{MaxSize: gp.MaxSize, Grace: gp.Grace, MaxDelay: gp.MaxDelay})
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %s", ErrDuplicateTask, p.info.ID)
	}
	return p.info, nil
}

// Batch is the tasks of an aggregation group this task hands over (nil
// for a task that is no batch): their types, payloads, headers and ids as
// enqueued.
func (t *Task) Batch() []*Task { return t.batch }

// Group is the aggregation group of a batch task ("" for another).
func (t *Task) Group() string { return t.group }

// loadBatch fills t's Batch from the members' stored messages.
func (w *Worker) loadBatch(ctx context.Context, q string, t *Task, ids []string) error {
	msgs, err := w.r.Messages(ctx, q, ids)
	if err != nil {
		return err
	}
	t.batch = make([]*Task, 0, len(ids))
	for _, id := range ids {
		b, ok := msgs[id]
		if !ok {
			continue // handed over and acknowledged already (a re-run after a late ack)
		}
		m, err := decodeMessage(id, q, b)
		if err != nil {
			return err
		}
		t.batch = append(t.batch, &Task{Type: m.Type, Payload: m.Payload, Headers: m.Headers, id: m.ID, queue: q, tenant: m.Tenant, max: m.MaxRetries})
	}
	return nil
}
