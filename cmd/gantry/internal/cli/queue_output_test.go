package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/taskq"
)

// The WHEN column says which time it shows: an active task's is its
// lease's end (30 s ahead), not when it started or ends.
func TestTaskWhenNamesItsTime(t *testing.T) {
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	later := at.Add(30 * time.Second)
	for _, tt := range []struct {
		d    taskq.TaskDetail
		want string
	}{
		{taskq.TaskDetail{State: "pending", EnqueuedAt: at}, "enqueued 2026-11-29T08:00:00Z"},
		{taskq.TaskDetail{State: "scheduled", EnqueuedAt: at, DueAt: &later}, "due 2026-11-29T08:00:30Z"},
		{taskq.TaskDetail{State: "active", EnqueuedAt: at, LeaseUntil: &later}, "lease until 2026-11-29T08:00:30Z"},
		{taskq.TaskDetail{State: "dead", EnqueuedAt: at, EndedAt: &later}, "ended 2026-11-29T08:00:30Z"},
		{taskq.TaskDetail{State: "completed", EnqueuedAt: at, EndedAt: &at, KeptUntil: &later}, "kept until 2026-11-29T08:00:30Z"},
	} {
		if got := taskWhen(tt.d); got != tt.want {
			t.Errorf("%s task: WHEN %q, want %q", tt.d.State, got, tt.want)
		}
	}
}

// A worker's line in `queue stats` is its record, written every few
// seconds: the line says how old it is, and that its rate is over its last
// window (or that none has closed yet), so that it is not read as live
// beside the queue rows.
func TestStatsWorkerLineSaysItsAge(t *testing.T) {
	var b bytes.Buffer
	printStats(&b, &taskq.Stats{Workers: []taskq.WorkerRecord{
		{ID: "w1", State: "running", Queues: []string{"demo"}, Processed: 8207, Heartbeat: time.Now().Add(-3 * time.Second)},
		{ID: "w2", State: "running", Queues: []string{"demo"}, Heartbeat: time.Now(), WindowEnd: time.Now(), RatePerSec: 4321},
	}})
	out := b.String()
	for _, want := range []string{"worker w1: running, queues demo, active 0, processed 8207", "rate: no window closed yet (its record, 3s old)",
		"4321 tasks/s over its last window (its record, 0s old)"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lacks %q:\n%s", want, out)
		}
	}
}
