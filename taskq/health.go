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
	MemoryWarning, MemoryCritical       float64       // share of Redis's maxmemory, and of a worker's memory limit; default 0.75, 0.9
	StaleHeartbeat                      time.Duration // default 1m
	// Degraded is the share of its recent average throughput under which a
	// worker with work waiting is reported degraded; default 0.5.
	Degraded float64
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
	if c.Degraded <= 0 {
		c.Degraded = 0.5
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
	live, measuring, rate := checkWorkers(cfg, st.Workers, pending > 0, &h)
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

// checkWorkers raises stale heartbeats, high error rates, memory near its
// limit and degradation (throughput fallen, errors rising, against the
// worker's own recent average) of running workers, and sums their rates;
// measuring counts those too young to judge.
func checkWorkers(cfg HealthConfig, workers []WorkerRecord, backlog bool, h *Health) (live, measuring int, rate float64) {
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
		checkWorkerMemory(cfg, w, h)
		checkTrend(cfg, w, backlog, h)
	}
	return live, measuring, rate
}

// checkWorkerMemory raises a worker's memory against its limit.
func checkWorkerMemory(cfg HealthConfig, w WorkerRecord, h *Health) {
	if w.MemLimit <= 0 {
		return
	}
	f := float64(w.MemBytes) / float64(w.MemLimit)
	switch {
	case f >= cfg.MemoryCritical:
		h.raise(Critical, "worker %s: memory %.0f%% of its limit (%d MiB)", w.ID, 100*f, w.MemLimit>>20)
	case f >= cfg.MemoryWarning:
		h.raise(Warning, "worker %s: memory %.0f%% of its limit (%d MiB)", w.ID, 100*f, w.MemLimit>>20)
	}
}

// checkTrend compares a worker's last window with its average over the
// recent ones (seed §7.1): throughput fallen under Degraded of it while work
// waits, or the error rate doubled past half the warning level, is a
// Warning. Three windows at least make a baseline.
func checkTrend(cfg HealthConfig, w WorkerRecord, backlog bool, h *Health) {
	if w.Windows < 3 || w.WindowEnd.IsZero() {
		return
	}
	if backlog && w.RateAvg > 0 && w.RatePerSec < cfg.Degraded*w.RateAvg {
		h.raise(Warning, "worker %s: throughput degraded to %.1f/s from %.1f/s on average over %d windows", w.ID, w.RatePerSec, w.RateAvg, w.Windows)
	}
	if w.ErrorRate >= cfg.ErrorRateWarning/2 && w.ErrorRate >= 2*w.ErrorRateAvg && w.ErrorRate < cfg.ErrorRateWarning {
		h.raise(Warning, "worker %s: error rate rising, %.0f%% against %.0f%% on average", w.ID, 100*w.ErrorRate, 100*w.ErrorRateAvg)
	}
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
