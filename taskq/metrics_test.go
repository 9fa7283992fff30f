package taskq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/testutil"
)

// documentedSeries reads the metric names of the Metrics table in
// taskq/README.md.
func documentedSeries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "## Metrics")
	if !ok {
		t.Fatal("taskq/README.md has no Metrics section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(taskq_[a-z_]+)`").FindAllStringSubmatch(sec, -1) {
		names = append(names, m[1])
	}
	if len(names) < 15 {
		t.Fatalf("the Metrics table lists %d series", len(names))
	}
	return names
}

// sample finds the value of series name{labels…} in a scrape.
func sample(scrape, series string) (float64, bool) {
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// Every series the README documents is on /metrics, and the ones a run of
// successes, a retry, a dead letter, an unknown type, a cancel and an idle
// spell should move have moved. The failure callback sees the retry and the
// dead letter; a completion is logged at debug level.
func TestMetricsSeries(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	in := newInspector(t, addr)
	q := uniq(t, "m")
	reg := prometheus.NewRegistry()
	var logs testutil.Buffer
	var mu sync.Mutex
	var failures []string
	wk := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Registry: reg,
		Retry:  backoff.Policy{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnFailure: func(tk *Task, err error, dead bool) {
			mu.Lock()
			failures = append(failures, fmt.Sprintf("%s dead=%v", tk.Type, dead))
			mu.Unlock()
		}})
	flaky := 0
	wk.Handle("ok", func(context.Context, *Task) error { return nil })
	wk.Handle("flaky", func(context.Context, *Task) error {
		if flaky++; flaky == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	wk.Handle("bury", func(context.Context, *Task) error { return SkipRetry })
	started := make(chan string, 1)
	wk.Handle("block", func(ctx context.Context, tk *Task) error { started <- tk.ID(); <-ctx.Done(); return ctx.Err() })
	runWorker(t, wk)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	scrape := func() string {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// Right after the start, before any task, the queue's counters are
	// there at 0 (seed §1: counters initialised).
	var first string
	waitFor(t, 5*time.Second, "the maintainer's first gauges", func() bool { first = scrape(); return strings.Contains(first, "taskq_queue_size{") })
	for _, name := range []string{"taskq_tasks_retried_total", "taskq_tasks_snoozed_total", "taskq_tasks_dead_total", "taskq_tasks_invalid_total", "taskq_tasks_duplicate_total",
		"taskq_tasks_abandoned_total", "taskq_tasks_requeued_total", "taskq_tasks_cancelled_total", "taskq_leases_expired_total", "taskq_steals_total",
		"taskq_task_duration_seconds_count", "taskq_task_wait_seconds_count"} {
		if v, ok := sample(first, name+`{queue="`+q+`"}`); !ok || v != 0 {
			t.Errorf("before any task: %s{queue=%q} = %v (present %v), want 0", name, q, v, ok)
		}
	}
	for range 3 {
		enqueue(t, c, "ok", Queue(q), Tenant("t1"))
	}
	enqueue(t, c, "flaky", Queue(q), Tenant("t1"))
	enqueue(t, c, "bury", Queue(q), Tenant("t1"))
	enqueue(t, c, "no-such-type", Queue(q), Tenant("t1"))
	id := enqueue(t, c, "block", Queue(q), Tenant("t1"))
	<-started
	if _, err := in.Cancel(t.Context(), q, id, "test"); err != nil {
		t.Fatal(err)
	}
	l := `{queue="` + q + `"}`
	want := map[string]float64{
		`taskq_tasks_processed_total{outcome="success",queue="` + q + `",tenant="t1"}`: 4,
		`taskq_tasks_processed_total{outcome="failure",queue="` + q + `",tenant="t1"}`: 2,
		"taskq_tasks_retried_total" + l: 1, "taskq_tasks_dead_total" + l: 2, "taskq_tasks_invalid_total" + l: 1,
		"taskq_tasks_cancelled_total" + l: 1, "taskq_task_wait_seconds_count" + l: 7,
	}
	var body string
	waitFor(t, 10*time.Second, "the counters to move", func() bool {
		body = scrape()
		if !strings.Contains(body, `taskq_tenant_pending{queue="`+q+`",tenant="t1"}`) {
			return false
		}
		for s, v := range want {
			if got, ok := sample(body, s); !ok || got != v {
				return false
			}
		}
		return true
	})
	for _, s := range []string{"taskq_dequeue_calls_total", "taskq_empty_dequeues_total", "taskq_idle_seconds_total"} {
		if v, _ := sample(body, s); v < 1e-9 {
			t.Errorf("%s = %v, want > 0", s, v)
		}
	}
	for _, name := range documentedSeries(t) {
		if !regexp.MustCompile(`(?m)^` + name + `(_bucket|_count|_sum)?[{ ]`).MatchString(body) {
			t.Errorf("/metrics lacks %s, which taskq/README.md documents", name)
		}
	}
	mu.Lock()
	got := strings.Join(failures, ", ")
	mu.Unlock()
	if !strings.Contains(got, "flaky dead=false") || !strings.Contains(got, "bury dead=true") || !strings.Contains(got, "no-such-type dead=true") {
		t.Errorf("OnFailure saw %q; want the retry and both dead letters", got)
	}
	if !strings.Contains(logs.String(), `msg="taskq: task completed"`) {
		t.Error("no completion was logged at debug level")
	}
}

// A handler learns who runs it and the task's times: worker id and host,
// the attempt and starts, when it was enqueued, and a lease deadline that
// the heartbeats move forward while it runs.
func TestHandlerSeesWorkerAndTask(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "ctx")
	wk := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, HeartbeatInterval: 100 * time.Millisecond,
		LeaseDuration: 2 * time.Second, Retry: backoff.Policy{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	type seen struct {
		id, queue, tenant, worker, host    string
		attempt, starts, retried, maxRetry int
		enqueued, lease0, lease            time.Time
	}
	out := make(chan seen, 2)
	wk.Handle("probe", func(ctx context.Context, tk *Task) error {
		s := seen{id: tk.ID(), queue: tk.Queue(), tenant: tk.Tenant(), worker: tk.WorkerID(), host: tk.Host(), attempt: tk.Attempt(),
			starts: tk.Starts(), retried: tk.Retried(), maxRetry: tk.MaxRetries(), enqueued: tk.EnqueuedAt(), lease0: tk.LeaseDeadline()}
		if tk.Attempt() == 1 {
			out <- s
			return errors.New("once more")
		}
		time.Sleep(450 * time.Millisecond) // real time: heartbeats must extend the lease meanwhile
		s.lease = tk.LeaseDeadline()
		out <- s
		return nil
	})
	runWorker(t, wk)
	t0 := time.Now()
	id := enqueue(t, c, "probe", Queue(q), Tenant("acme"), MaxRetries(3))
	first, second := <-out, <-out
	host, _ := os.Hostname()
	if first.worker != wk.ID() || first.host != host || first.attempt != 1 || first.starts != 1 || first.retried != 0 {
		t.Fatalf("first attempt saw %+v; want worker %s on %s, attempt 1", first, wk.ID(), host)
	}
	if first.id != id || first.queue != q || first.tenant != "acme" || first.maxRetry != 3 {
		t.Fatalf("first attempt saw task %s of %s, tenant %s, max retries %d; want %s of %s, acme, 3", first.id, first.queue, first.tenant, first.maxRetry, id, q)
	}
	if second.attempt != 2 || second.starts != 2 || second.retried != 1 {
		t.Fatalf("second attempt saw attempt %d, starts %d, retried %d", second.attempt, second.starts, second.retried)
	}
	if d := second.enqueued.Sub(t0); d < -time.Second || d > time.Second {
		t.Fatalf("EnqueuedAt %v is not when it was enqueued (%v)", second.enqueued, t0)
	}
	if second.lease0.IsZero() || !second.lease.After(second.lease0.Add(200*time.Millisecond)) {
		t.Fatalf("lease deadline %v → %v: the heartbeats did not move it", second.lease0, second.lease)
	}
}
