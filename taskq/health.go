package taskq

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Status is a health verdict (seed §7.2).
type Status int

// Health statuses, worst last.
const (
	OK Status = iota
	Warning
	Critical
)

func (s Status) String() string {
	switch s {
	case OK:
		return "OK"
	case Warning:
		return "Warning"
	case Critical:
		return "Critical"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// MarshalText writes the status name.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Health is the verdict with the reasons behind it.
type Health struct {
	Status  Status         `json:"status"`
	Reasons []string       `json:"reasons"`
	Checks  map[string]any `json:"checks"`
}

func (h *Health) raise(s Status, format string, args ...any) {
	if s > h.Status {
		h.Status = s
	}
	h.Reasons = append(h.Reasons, fmt.Sprintf("%s: ", s)+fmt.Sprintf(format, args...))
}

// HealthConfig holds the thresholds; zero values are the defaults.
type HealthConfig struct {
	ErrorRateWarning, ErrorRateCritical float64       // default 0.1, 0.5
	MemoryWarning, MemoryCritical       float64       // share of maxmemory; default 0.75, 0.9
	StaleHeartbeat                      time.Duration // default 1m
}

func (c *HealthConfig) defaults() {
	if c.ErrorRateWarning <= 0 {
		c.ErrorRateWarning = 0.1
	}
	if c.ErrorRateCritical <= 0 {
		c.ErrorRateCritical = 0.5
	}
	if c.MemoryWarning <= 0 {
		c.MemoryWarning = 0.75
	}
	if c.MemoryCritical <= 0 {
		c.MemoryCritical = 0.9
	}
	if c.StaleHeartbeat <= 0 {
		c.StaleHeartbeat = time.Minute
	}
}

// Health checks Redis reachability and memory, and from the worker records
// and queue stats: error rates, processing rate against backlogs, and
// workers whose heartbeat stopped.
func (c *Client) Health(ctx context.Context, cfg HealthConfig) Health {
	cfg.defaults()
	h := Health{Status: OK, Reasons: []string{}, Checks: map[string]any{}}
	start := time.Now()
	if err := c.r.Ping(ctx); err != nil {
		h.Checks["redis"] = err.Error()
		h.raise(Critical, "redis unreachable: %v", err)
		return h
	}
	h.Checks["redis_ping_ms"] = float64(time.Since(start).Microseconds()) / 1000
	c.checkMemory(ctx, cfg, &h)
	st, err := c.Stats(ctx)
	if err != nil {
		h.raise(Critical, "cannot read stats: %v", err)
		return h
	}
	var pending int64
	for _, q := range st.Queues {
		pending += q.Pending
	}
	h.Checks["pending"] = pending
	live, measuring, rate := checkWorkers(cfg, st.Workers, &h)
	h.Checks["live_workers"] = live
	h.Checks["rate_per_sec"] = rate
	switch {
	case pending > 0 && live == 0:
		h.raise(Critical, "%d tasks pending and no live worker", pending)
	case pending > 0 && rate == 0 && live > measuring:
		h.raise(Warning, "%d tasks pending but no task processed in the last window", pending)
	}
	return h
}

// checkMemory raises Redis memory against maxmemory.
func (c *Client) checkMemory(ctx context.Context, cfg HealthConfig, h *Health) {
	used, maxMem, err := c.r.UsedMemory(ctx)
	if err != nil {
		return
	}
	h.Checks["redis_used_memory"] = used
	if maxMem == 0 {
		return
	}
	f := float64(used) / float64(maxMem)
	h.Checks["redis_memory_share"] = f
	if f >= cfg.MemoryCritical {
		h.raise(Critical, "redis memory %.0f%% of maxmemory", 100*f)
	} else if f >= cfg.MemoryWarning {
		h.raise(Warning, "redis memory %.0f%% of maxmemory", 100*f)
	}
}

// checkWorkers raises stale heartbeats and high error rates of running
// workers and sums their rates; measuring counts those too young to judge.
func checkWorkers(cfg HealthConfig, workers []WorkerRecord, h *Health) (live, measuring int, rate float64) {
	for _, w := range workers {
		if w.State != "running" {
			continue
		}
		if age := time.Since(w.Heartbeat); age > cfg.StaleHeartbeat {
			h.raise(Warning, "worker %s: no heartbeat for %s (crashed?)", w.ID, age.Round(time.Second))
			continue
		}
		live++
		if w.WindowEnd.IsZero() {
			measuring++ // too young to judge its rate
		}
		rate += w.RatePerSec
		switch {
		case w.ErrorRate >= cfg.ErrorRateCritical:
			h.raise(Critical, "worker %s: error rate %.0f%%", w.ID, 100*w.ErrorRate)
		case w.ErrorRate >= cfg.ErrorRateWarning:
			h.raise(Warning, "worker %s: error rate %.0f%%", w.ID, 100*w.ErrorRate)
		}
	}
	return live, measuring, rate
}

// HealthHandler serves c.Health as JSON: 200 for OK and Warning, 503 for Critical.
func HealthHandler(c *Client, cfg HealthConfig) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
		defer cancel()
		h := c.Health(ctx, cfg)
		rw.Header().Set("Content-Type", "application/json")
		if h.Status == Critical {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(rw).Encode(h)
	})
}
