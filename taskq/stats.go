package taskq

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// Stats is the state of every known queue: the shape `gantry queue stats
// --json` prints.
type Stats struct {
	Queues  map[string]QueueStats `json:"queues"`
	Workers []WorkerRecord        `json:"workers,omitempty"`
}

// QueueStats is one queue's sizes and counters.
type QueueStats struct {
	Pending         int64 `json:"pending"`
	Active          int64 `json:"active"`
	Scheduled       int64 `json:"scheduled"`
	Retry           int64 `json:"retry"`
	Dead            int64 `json:"dead"`
	Completed       int64 `json:"completed"` // successful tasks, ever
	Retained        int64 `json:"retained"`  // completed tasks still kept (Retention)
	Enqueued        int64 `json:"enqueued_total"`
	ProcessedTotal  int64 `json:"processed_total"` // attempts that ended, success or failure
	FailedTotal     int64 `json:"failed_total"`
	DuplicatesTotal int64 `json:"duplicates_total"` // re-deliveries after a lost lease
	ReapedTotal     int64 `json:"reaped_total"`     // leases expired and taken back
	DeadTotal       int64 `json:"dead_total"`
	Cancelled       int64 `json:"cancelled"` // cancelled tasks still kept (dead retention)
	CancelledTotal  int64 `json:"cancelled_total"`
	// PausedUntil is when a pause of the whole queue ends (zero: not
	// paused; Indefinitely: until resumed).
	PausedUntil time.Time              `json:"paused_until,omitzero"`
	Limit       *LimitInfo             `json:"limit,omitempty"` // the queue's own limit and its use
	Tenants     map[string]TenantStats `json:"tenants"`
	// Tree is the inner nodes of the tenant tree (path prefixes: "acme",
	// "acme/web"), when some tenant is a path (tree.go).
	Tree map[string]NodeStats `json:"tree,omitempty"`
}

// TenantStats is one tenant's share of a queue.
type TenantStats struct {
	Pending   int64   `json:"pending"`
	Active    int64   `json:"active"`
	Completed int64   `json:"completed"`
	Weight    float64 `json:"weight"`
	// PausedUntil is when the tenant's pause ends (zero: not paused).
	PausedUntil time.Time  `json:"paused_until,omitzero"`
	Limit       *LimitInfo `json:"limit,omitempty"` // the tenant's limit and its use
}

// WorkerRecord is what a worker writes about itself into Redis (tq:workers)
// on every heartbeat: a compact stats record.
type WorkerRecord struct {
	ID        string    `json:"id"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Queues    []string  `json:"queues"`
	State     string    `json:"state"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
	Active    int       `json:"active"`
	Processed int64     `json:"processed"`
	Failed    int64     `json:"failed"`
	Steals    int64     `json:"steals"`
	// Window figures over the last health window.
	WindowEnd  time.Time `json:"window_end,omitzero"` // zero until the first window is complete
	RatePerSec float64   `json:"rate_per_sec"`
	ErrorRate  float64   `json:"error_rate"`
	RetryScale float64   `json:"retry_scale"`
	// Averages over the last windows (up to 12: a minute by default), the
	// baseline the health check compares the last window with.
	Windows      int     `json:"windows,omitempty"`
	RateAvg      float64 `json:"rate_avg"`
	ErrorRateAvg float64 `json:"error_rate_avg"`
	// The worker process's memory: Go heap and runtime bytes in use, and the
	// limit they must stay under (GOMEMLIMIT, or 0: none).
	MemBytes int64 `json:"mem_bytes"`
	MemLimit int64 `json:"mem_limit,omitempty"`
}

// Indefinitely is the PausedUntil of a pause without an end (until
// resumed) and the ThrottledUntil of a tenant at its in-flight cap (until
// one of its tasks ends): the last second of year 9999, the latest time
// JSON can carry.
var Indefinitely = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// Stats reads every known queue's state and the worker records.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	qs, err := c.r.Queues(ctx)
	if err != nil {
		return nil, err
	}
	sort.Strings(qs)
	now := time.Now()
	out := &Stats{Queues: make(map[string]QueueStats, len(qs))}
	for _, q := range qs {
		st, err := c.r.Stats(ctx, q)
		if err != nil {
			return nil, err
		}
		qs := QueueStats{
			Pending: st.Pending, Active: st.Active, Scheduled: st.Scheduled, Retry: st.Retry, Dead: st.Dead,
			Retained: st.Retained, Completed: st.Counters["completed"], Enqueued: st.Counters["enqueued"],
			ProcessedTotal: st.Counters["processed"], FailedTotal: st.Counters["failed"],
			DuplicatesTotal: st.Counters["dup"], ReapedTotal: st.Counters["reaped"], DeadTotal: st.Counters["deadtotal"],
			Cancelled: st.Cancelled, CancelledTotal: st.Counters["cancelled"], PausedUntil: pausedAfter(st.PausedUntil, now),
			Tenants: make(map[string]TenantStats, len(st.Tenants)),
		}
		for t, ts := range st.Tenants {
			qs.Tenants[t] = TenantStats{Pending: ts.Pending, Active: ts.Active, Completed: ts.Completed, Weight: ts.Weight,
				PausedUntil: pausedAfter(ts.PausedUntil, now)}
		}
		qs.Tree = treeStats(qs.Tenants)
		ls, err := c.r.Limits(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, li := range limitInfos(q, ls, st) {
			if li.Tenant == "" {
				qs.Limit = &li
				continue
			}
			addLimit(&qs, li)
		}
		out.Queues[q] = qs
	}
	ws, err := c.r.Workers(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range ws {
		var w WorkerRecord
		if json.Unmarshal([]byte(v), &w) == nil {
			out.Workers = append(out.Workers, w)
		}
	}
	sort.Slice(out.Workers, func(i, j int) bool { return out.Workers[i].ID < out.Workers[j].ID })
	return out, nil
}

// pausedAfter is until if the pause is still on at now, else zero (a pause
// that ran out ends in Redis at the next dequeue or maintenance).
func pausedAfter(until, now time.Time) time.Time {
	if !until.Before(rdb.Forever) {
		return Indefinitely
	}
	if until.After(now) {
		return until
	}
	return time.Time{}
}
