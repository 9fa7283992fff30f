package taskq

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// Limit caps a queue, or one tenant of it, across every worker. The dequeue
// script enforces it in the same single Redis call that takes the tasks: a
// tenant out of rate tokens or at its in-flight cap is set aside and the
// next tenant is served, so a limited tenant never holds up the others.
// Zero fields are no limit.
type Limit struct {
	// Rate is how many tasks may start per second (a token bucket refilled
	// continuously); Burst is the bucket's size: how many may start at once
	// after a quiet spell (default 1: starts are spaced 1/Rate apart).
	Rate  float64 `json:"rate_per_sec,omitempty"`
	Burst int     `json:"burst,omitempty"`
	// MaxActive is how many tasks may run at once.
	MaxActive int `json:"max_active,omitempty"`
	// Weight (tenants only) is the tenant's fair-share weight, overriding
	// the Weight its enqueues carry.
	Weight float64 `json:"weight,omitempty"`
}

// LimitInfo is one limit as Limits lists it, with its current use.
type LimitInfo struct {
	Queue  string `json:"queue"`
	Tenant string `json:"tenant,omitempty"` // "": the queue's own limit
	Limit
	Active int64 `json:"active"` // tasks of the queue or tenant running now
	// Tokens is what the rate bucket holds now (Rate only).
	Tokens float64 `json:"tokens,omitempty"`
	// ThrottledUntil is when a throttled tenant or queue may start a task
	// again (Indefinitely: when one of its running tasks ends); zero
	// when it is not throttled.
	ThrottledUntil time.Time `json:"throttled_until,omitzero"`
}

func (l Limit) check(tenant string) error {
	if l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Burst < 0 || l.MaxActive < 0 || l.Weight < 0 || math.IsNaN(l.Weight) {
		return fmt.Errorf("taskq: limit %+v: no field may be negative", l)
	}
	if err := checkWeight(l.Weight); err != nil {
		return fmt.Errorf("taskq: limit: %w", err)
	}
	switch {
	case l.Rate == 0 && l.Burst > 0:
		return fmt.Errorf("taskq: limit: a burst needs a rate")
	case l.Weight > 0 && tenant == "":
		return fmt.Errorf("taskq: limit: a weight is a tenant's (give a tenant)")
	case l == Limit{}:
		return fmt.Errorf("taskq: limit: give a rate, a max-active or a weight (to remove a limit, clear it)")
	}
	return nil
}

// SetLimit sets the limit of queue, or of one tenant of it (tenant ""),
// replacing the one it had. It takes effect at the next dequeue of every
// worker.
func (i *Inspector) SetLimit(ctx context.Context, queue, tenant string, l Limit) error {
	if err := checkName("queue", queue); err != nil {
		return err
	}
	if tenant != "" {
		if err := checkTenant("tenant", tenant); err != nil {
			return err
		}
	}
	if err := l.check(tenant); err != nil {
		return err
	}
	if l.Rate > 0 && l.Burst == 0 {
		l.Burst = 1
	}
	if err := i.r.RegisterQueues(ctx, queue); err != nil {
		return err
	}
	return i.r.SetLimit(ctx, queue, tenant, rdb.Limit(l))
}

// ClearLimit removes the limit of queue or of one tenant of it (tenant "":
// the queue's own); it reports whether there was one.
func (i *Inspector) ClearLimit(ctx context.Context, queue, tenant string) (bool, error) {
	if err := checkName("queue", queue); err != nil {
		return false, err
	}
	return i.r.ClearLimit(ctx, queue, tenant, false)
}

// ClearLimits removes every limit of queue.
func (i *Inspector) ClearLimits(ctx context.Context, queue string) (bool, error) {
	if err := checkName("queue", queue); err != nil {
		return false, err
	}
	return i.r.ClearLimit(ctx, queue, "", true)
}

// Limits lists the limits of queue, or of every known queue ("").
func (i *Inspector) Limits(ctx context.Context, queue string) ([]LimitInfo, error) {
	qs := []string{queue}
	if queue == "" {
		var err error
		if qs, err = i.r.Queues(ctx); err != nil {
			return nil, err
		}
		sort.Strings(qs)
	}
	var out []LimitInfo
	for _, q := range qs {
		ls, err := i.r.Limits(ctx, q)
		if err != nil || len(ls) == 0 {
			if err != nil {
				return nil, err
			}
			continue
		}
		st, err := i.r.Stats(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, limitInfos(q, ls, st)...)
	}
	return out, nil
}

func limitInfos(q string, ls map[string]rdb.LimitState, st rdb.QueueStats) []LimitInfo {
	out := make([]LimitInfo, 0, len(ls))
	for t, l := range ls {
		li := LimitInfo{Queue: q, Tenant: t, Limit: Limit(l.Limit), ThrottledUntil: l.ThrottledUntil}
		if !li.ThrottledUntil.Before(rdb.Forever) {
			li.ThrottledUntil = Indefinitely
		}
		if l.Rate > 0 {
			li.Tokens = math.Floor(l.Tokens*100) / 100
		}
		if t == "" {
			li.Active = st.Active
		} else {
			li.Active = st.Tenants[t].Active + nodeActive(st, t)
		}
		out = append(out, li)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Tenant < out[b].Tenant })
	return out
}

// ParseRate reads a rate as the CLI takes it: "20/s", "300/m", "1000/h",
// or a bare number of tasks per second.
func ParseRate(s string) (float64, error) {
	num, unit, slash := strings.Cut(strings.TrimSpace(s), "/")
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || !(n > 0) || math.IsInf(n, 0) { // NaN too
		return 0, fmt.Errorf("rate %q: want N/s, N/m or N/h with N > 0", s)
	}
	if slash && unit == "" {
		return 0, fmt.Errorf("rate %q: the unit after / is s, m or h", s)
	}
	switch unit {
	case "", "s", "sec":
		return n, nil
	case "m", "min":
		return n / 60, nil
	case "h":
		return n / 3600, nil
	}
	return 0, fmt.Errorf("rate %q: the unit is s, m or h", s)
}
