package rdb

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Dequeued is one task handed to a worker.
type Dequeued struct {
	Queue   string
	ID      string
	Msg     []byte // empty when the task's message is missing
	Retried int
	Starts  int    // attempts (Retried+1) plus the starts lost with a lease
	Tenant  string // from the task's member in Redis, its one source
	// LeaseUntil is the lease the dequeue gave (heartbeats extend it).
	LeaseUntil time.Time
	// Redelivered says this start follows a lost lease (at-least-once: the
	// task may have run, in part or whole, before).
	Redelivered bool
}

// DequeueResult is what one dequeue call gave.
type DequeueResult struct {
	Tasks []Dequeued
	// Retry is the earliest time a tenant or queue throttled by a rate may
	// run again (zero: none).
	Retry time.Time
	// Pending is each queue's pending count after the call, counted by the
	// script itself (on a cluster, only the queues the calls reached).
	Pending map[string]int64
}

// Dequeue takes up to n tasks from queues, serving them in the given order,
// in one script call (one per queue on a cluster), and reports each
// queue's backlog.
func (r *RDB) Dequeue(ctx context.Context, queues []string, n int, now, leaseUntil time.Time) (DequeueResult, error) {
	res := DequeueResult{Pending: make(map[string]int64, len(queues))}
	if len(queues) == 0 || n <= 0 {
		return res, nil
	}
	args := []string{strconv.Itoa(n), ms(now), ms(leaseUntil), "100"}
	if !r.cluster {
		keys := make([]string, 0, NKeys*len(queues))
		for _, q := range queues {
			keys = append(keys, QueueKeys(q)...)
		}
		err := r.dequeue(ctx, queues, keys, args, leaseUntil, &res)
		return res, err
	}
	for _, q := range queues {
		args[0] = strconv.Itoa(n - len(res.Tasks))
		if err := r.dequeue(ctx, []string{q}, QueueKeys(q), args, leaseUntil, &res); err != nil {
			return res, err
		}
		if len(res.Tasks) >= n {
			break
		}
	}
	return res, nil
}

// dequeue runs one script call over queues and adds its outcome to res.
func (r *RDB) dequeue(ctx context.Context, queues, keys, args []string, leaseUntil time.Time, res *DequeueResult) error {
	vals, err := dequeueScript.Exec(ctx, r.c, keys, args).ToArray()
	if err != nil {
		return fmt.Errorf("rdb: dequeue: %w", err)
	}
	nq := len(queues)
	if len(vals) < nq+1 || (len(vals)-nq-1)%7 != 0 {
		return fmt.Errorf("rdb: dequeue: %d values returned for %d queues", len(vals), nq)
	}
	for i, v := range vals[len(vals)-nq:] {
		res.Pending[queues[i]], _ = v.AsInt64()
	}
	if hint, _ := vals[len(vals)-nq-1].AsInt64(); hint > 0 {
		if rt := time.UnixMilli(hint); res.Retry.IsZero() || rt.Before(res.Retry) {
			res.Retry = rt
		}
	}
	vals = vals[:len(vals)-nq-1]
	for i := 0; i+6 < len(vals); i += 7 {
		qi, _ := vals[i].AsInt64()
		id, _ := vals[i+1].ToString()
		v, _ := vals[i+2].ToString()
		_, msg := splitStored(v)
		retried, _ := vals[i+3].AsInt64()
		starts, _ := vals[i+4].AsInt64()
		tenant, _ := vals[i+5].ToString()
		flags, _ := vals[i+6].AsInt64()
		if qi < 1 || int(qi) > nq {
			return fmt.Errorf("rdb: dequeue: queue index %d out of range", qi)
		}
		res.Tasks = append(res.Tasks, Dequeued{Queue: queues[qi-1], ID: id, Msg: []byte(msg), Retried: int(retried), Starts: int(starts), Tenant: tenant, LeaseUntil: leaseUntil,
			Redelivered: flags&2 != 0})
	}
	return nil
}

// AckItem is one successful task.
type AckItem struct {
	ID        string
	KeepUntil time.Time // zero: delete the task at once
	Result    []byte
}

// Ack records successful tasks of queue q; it returns how many were still held.
func (r *RDB) Ack(ctx context.Context, q string, now time.Time, items []AckItem) (int, error) {
	args := make([]string, 0, 1+3*len(items))
	args = append(args, ms(now))
	for _, it := range items {
		keep := msOrZero(it.KeepUntil)
		args = append(args, it.ID, keep, string(it.Result))
	}
	n, err := ackScript.Exec(ctx, r.c, QueueKeys(q), args).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("rdb: ack in %q: %w", q, err)
	}
	return int(n), nil
}
