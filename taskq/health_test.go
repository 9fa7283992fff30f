package taskq

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

func TestHealth(t *testing.T) {
	red := testutil.StartRedis(t)
	c := newClient(t, red.Addr())
	ctx := t.Context()
	if h := c.Health(ctx, HealthConfig{}); h.Status != OK {
		t.Fatalf("empty system: %v %v, want OK", h.Status, h.Reasons)
	}
	// Redis's memory against its maxmemory: Warning from 75%, Critical from 90%.
	used, _, err := c.r.UsedMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		share  float64
		status Status
	}{{0.8, Warning}, {0.95, Critical}, {0, OK}} {
		maxMem := "0"
		if tc.share > 0 {
			maxMem = strconv.FormatInt(int64(float64(used)/tc.share), 10)
		}
		if err := c.r.Client().Do(ctx, c.r.Client().B().ConfigSet().ParameterValue().ParameterValue("maxmemory", maxMem).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		h := c.Health(ctx, HealthConfig{})
		if h.Status != tc.status || (tc.share > 0 && !strings.Contains(strings.Join(h.Reasons, ";"), "redis memory")) {
			t.Errorf("redis memory at about %.0f%% of maxmemory: %v %v, want %v", 100*tc.share, h.Status, h.Reasons, tc.status)
		}
	}
	enqueueTenant(t, c, "h", "x", 0, 5, Queue("h"))
	if h := c.Health(ctx, HealthConfig{}); h.Status != Critical || !strings.Contains(strings.Join(h.Reasons, ";"), "no live worker") {
		t.Errorf("backlog without workers: %v %v, want Critical (no live worker)", h.Status, h.Reasons)
	}
	// A worker whose error rate is high is a Warning or Critical with its id.
	rec := WorkerRecord{ID: "w1", State: "running", Heartbeat: time.Now(), WindowEnd: time.Now(), RatePerSec: 10, ErrorRate: 0.3}
	b, _ := json.Marshal(rec)
	if err := c.r.SetWorker(ctx, "w1", string(b)); err != nil {
		t.Fatal(err)
	}
	h := c.Health(ctx, HealthConfig{})
	if h.Status != Warning || !strings.Contains(strings.Join(h.Reasons, ";"), "worker w1: error rate 30%") {
		t.Errorf("error rate 30%%: %v %v, want Warning naming w1", h.Status, h.Reasons)
	}
	rec.ErrorRate = 0.6 // over the Critical threshold (0.5)
	b, _ = json.Marshal(rec)
	if err := c.r.SetWorker(ctx, "w1", string(b)); err != nil {
		t.Fatal(err)
	}
	if h := c.Health(ctx, HealthConfig{}); h.Status != Critical || !strings.Contains(strings.Join(h.Reasons, ";"), "worker w1: error rate 60%") {
		t.Errorf("error rate 60%%: %v %v, want Critical naming w1", h.Status, h.Reasons)
	}
	rec.ErrorRate = 0.3
	b, _ = json.Marshal(rec)
	if err := c.r.SetWorker(ctx, "w1", string(b)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(HealthHandler(c, HealthConfig{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Status  string   `json:"status"`
		Reasons []string `json:"reasons"`
	}
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || got.Status != "Warning" {
		t.Errorf("HTTP: %d %+v", resp.StatusCode, got)
	}
	red.Stop()
	if h := c.Health(ctx, HealthConfig{}); h.Status != Critical || !strings.Contains(h.Reasons[0], "redis unreachable") {
		t.Errorf("redis down: %v %v, want Critical (redis unreachable)", h.Status, h.Reasons)
	}
}

// Each worker check of the health verdict, on synthetic worker records: a
// stale heartbeat, no progress with a backlog, memory near the worker's
// limit, throughput degraded against its own average, a rising error rate;
// and a live worker's own record carries its memory and trend.
func TestHealthWorkerChecks(t *testing.T) {
	red := testutil.StartRedis(t)
	c := newClient(t, red.Addr())
	ctx := t.Context()
	enqueueTenant(t, c, "h", "x", 0, 5, Queue("h")) // a backlog
	now := time.Now()
	healthy := WorkerRecord{ID: "w", State: "running", Heartbeat: now, WindowEnd: now, RatePerSec: 10, Windows: 12, RateAvg: 10}
	for _, tc := range []struct {
		name   string
		rec    func(r *WorkerRecord)
		status Status
		reason string
	}{
		{"healthy", func(*WorkerRecord) {}, OK, ""},
		// Stale: a Warning of its own; with nobody else live the backlog makes it Critical.
		{"stale heartbeat", func(r *WorkerRecord) { r.Heartbeat = now.Add(-2 * time.Minute) }, Critical, "Warning: worker w: no heartbeat for 2m"},
		{"no progress with a backlog", func(r *WorkerRecord) { r.RatePerSec, r.RateAvg = 0, 0 }, Warning, "no task processed in the last window"},
		{"memory near the limit", func(r *WorkerRecord) { r.MemBytes, r.MemLimit = 80<<20, 100<<20 }, Warning, "memory 80% of its limit (100 MiB)"},
		{"memory at the limit", func(r *WorkerRecord) { r.MemBytes, r.MemLimit = 95<<20, 100<<20 }, Critical, "memory 95% of its limit"},
		{"degraded throughput", func(r *WorkerRecord) { r.RatePerSec = 3 }, Warning, "throughput degraded to 3.0/s from 10.0/s on average over 12 windows"},
		{"rising error rate", func(r *WorkerRecord) { r.ErrorRate, r.ErrorRateAvg = 0.08, 0.01 }, Warning, "error rate rising, 8% against 1%"},
		{"too few windows for a trend", func(r *WorkerRecord) { r.RatePerSec, r.Windows = 3, 2 }, OK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := healthy
			tc.rec(&rec)
			b, _ := json.Marshal(rec)
			if err := c.r.SetWorker(ctx, "w", string(b)); err != nil {
				t.Fatal(err)
			}
			h := c.Health(ctx, HealthConfig{})
			all := strings.Join(h.Reasons, "; ")
			if h.Status != tc.status || !strings.Contains(all, tc.reason) {
				t.Fatalf("%v %q; want %v containing %q", h.Status, all, tc.status, tc.reason)
			}
		})
	}
	// A real worker's record: memory in use, its limit, the trend.
	c.r.DeleteWorker(ctx, "w")
	debugLimit := debug.SetMemoryLimit(1 << 40)
	defer debug.SetMemoryLimit(debugLimit)
	w := newTestWorker(t, red.Addr(), WorkerConfig{Queues: []QueueSpec{{Name: "h"}}, Adaptive: AdaptiveConfig{Interval: 20 * time.Millisecond}})
	w.Handle("noop", func(context.Context, *Task) error { return nil })
	runWorker(t, w)
	waitFor(t, 10*time.Second, "a record with memory and a trend", func() bool {
		st, err := c.Stats(ctx)
		if err != nil || len(st.Workers) != 1 {
			return false
		}
		r := st.Workers[0]
		return r.MemBytes > 1<<20 && r.MemLimit == 1<<40 && r.Windows >= 3
	})
}
