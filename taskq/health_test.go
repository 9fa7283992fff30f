package taskq

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHealth(t *testing.T) {
	red := startPrivateRedis(t)
	c := newClient(t, red.addr())
	ctx := t.Context()
	if h := c.Health(ctx, HealthConfig{}); h.Status != OK {
		t.Fatalf("empty system: %v %v, want OK", h.Status, h.Reasons)
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
	red.stop()
	if h := c.Health(ctx, HealthConfig{}); h.Status != Critical || !strings.Contains(h.Reasons[0], "redis unreachable") {
		t.Errorf("redis down: %v %v, want Critical (redis unreachable)", h.Status, h.Reasons)
	}
}
