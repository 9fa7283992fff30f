package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/taskq"
)

func TestParseQueues(t *testing.T) {
	tests := []struct {
		in      string
		want    []taskq.QueueSpec
		wantErr string
	}{
		{"a", []taskq.QueueSpec{{Name: "a", Weight: 1}}, ""},
		{"a,b:3", []taskq.QueueSpec{{Name: "a", Weight: 1}, {Name: "b", Weight: 3}}, ""},
		{" a , b:2 ,", []taskq.QueueSpec{{Name: "a", Weight: 1}, {Name: "b", Weight: 2}}, ""},
		{"a:0", nil, `"a:0": weight "0" is not a positive integer`},
		{"a:x", nil, `weight "x"`},
		{",", nil, "no queue named"},
	}
	for _, tt := range tests {
		got, err := parseQueues(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseQueues(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("parseQueues(%q): %v", tt.in, err)
		}
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("parseQueues(%q) -want +got:\n%s", tt.in, d)
		}
	}
}

// TestQueueEnqueueStatsJSON checks the `stats --json` contract other tools
// rely on, against the shared test Redis.
func TestQueueEnqueueStatsJSON(t *testing.T) {
	addr := os.Getenv("GANTRY_TEST_REDIS")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err != nil {
		t.Fatalf("redis at %s: %v (run scripts/services.sh redis)", addr, err)
	} else {
		c.Close()
	}
	q := fmt.Sprintf("clitest-%d", os.Getpid())
	run := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := Execute(t.Context(), Env{Args: args, Stdout: &out, Stderr: &errb})
		return out.String() + errb.String(), code
	}
	if out, code := run("queue", "enqueue", "--redis", addr, "--queue", q, "--tenant", "t1", "--type", "noop", "--count", "3"); code != 0 {
		t.Fatalf("enqueue: %d %s", code, out)
	}
	if out, code := run("queue", "enqueue", "--redis", addr, "--queue", q, "--type", "noop", "--payload", "{bad"); code == 0 || !strings.Contains(out, "--payload is not valid JSON") {
		t.Errorf("bad payload: exit %d, %s", code, out)
	}
	// A unique task: the duplicate exits 3 and prints the holder's id.
	uargs := []string{"queue", "enqueue", "--redis", addr, "--queue", q + "-u", "--type", "noop", "--unique-key", "k", "--unique-for", "1m"}
	holder, code := run(uargs...)
	if code != 0 {
		t.Fatalf("unique enqueue: %d %s", code, holder)
	}
	if out, code := run(uargs...); code != 3 || !strings.HasPrefix(out, holder) || !strings.Contains(out, "duplicate") {
		t.Errorf("duplicate: exit %d, %q; want 3 and the holder %s", code, out, holder)
	}
	if out, code := run("queue", "enqueue", "--redis", addr, "--queue", q, "--type", "noop", "--unique-for", "1m"); code == 0 || !strings.Contains(out, "need --unique-key") {
		t.Errorf("--unique-for alone: exit %d, %s", code, out)
	}
	out, code := run("queue", "stats", "--redis", addr, "--json")
	if code != 0 {
		t.Fatalf("stats: %d %s", code, out)
	}
	var st struct {
		Queues map[string]map[string]any `json:"queues"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stats --json is not one object: %v\n%s", err, out)
	}
	qs := st.Queues[q]
	for _, k := range []string{"pending", "active", "scheduled", "retry", "dead", "completed", "processed_total", "failed_total", "duplicates_total", "tenants"} {
		if _, ok := qs[k]; !ok {
			t.Errorf("stats --json: queue object lacks %q: %v", k, qs)
		}
	}
	if qs["pending"] != float64(3) {
		t.Errorf("pending = %v, want 3", qs["pending"])
	}
	tenant := qs["tenants"].(map[string]any)["t1"].(map[string]any)
	for _, k := range []string{"pending", "active", "completed"} {
		if _, ok := tenant[k]; !ok {
			t.Errorf("tenant object lacks %q", k)
		}
	}
	if out, code := run("queue", "dlq", "delete", "--redis", addr, "--queue", q); code != 0 {
		t.Errorf("dlq delete: %d %s", code, out)
	}
	// Naming what is not there fails, as tasks get/cancel/delete do; so does
	// a listing no page gave.
	for _, bad := range [][]string{
		{"queue", "dlq", "requeue", "--redis", addr, "--queue", q, "--id", "nosuch"},
		{"queue", "dlq", "delete", "--redis", addr, "--queue", q, "--id", "nosuch"},
		{"queue", "tasks", "list", "--redis", addr, "--queue", q, "--limit", "0"},
		{"queue", "tasks", "list", "--redis", addr, "--queue", q, "--state", "pending", "--cursor", "garbage"},
		{"queue", "tasks", "list", "--redis", addr, "--queue", q, "--state", "bogus"},
		{"queue", "workflow", "list", "--redis", addr, "--queue", q, "--limit", "0"},
	} {
		if out, code := run(bad...); code == 0 {
			t.Errorf("%s: exit 0, %q; want a failure", strings.Join(bad[1:3], " ")+" "+strings.Join(bad[5:], " "), out)
		}
	}
	// Clean up the queue's keys through a worker-free path: delete them.
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr})
	if err == nil {
		c.Purge(t.Context(), q)
		c.Close()
	}
}

// TestQueueSortTask submits a sort job through the queue: a worker (the
// real `queue worker` command, in-process) runs `sort local` on it.
func TestQueueSortTask(t *testing.T) {
	addr := os.Getenv("GANTRY_TEST_REDIS")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	sortTestRecords(t, filepath.Join(in, "a"), 0, 20000, record.GenOptions{})
	q := fmt.Sprintf("clisort-%d", os.Getpid())
	defer func() {
		if c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr}); err == nil {
			c.Purge(t.Context(), q)
			c.Close()
		}
	}()
	payload, _ := json.Marshal(map[string]any{"input": []string{in}, "output": out})
	if code, msg := sortTestRun(t, "queue", "enqueue", "--redis", addr, "--queue", q, "--type", "sort",
		"--payload", string(payload), "--retention", "1m", "--max-retries", "0"); code != 0 {
		t.Fatalf("enqueue: %d %s", code, msg)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		var o, e bytes.Buffer
		done <- Execute(ctx, Env{Args: []string{"queue", "worker", "--redis", addr, "--queues", q, "--no-steal"}, Stdout: &o, Stderr: &e})
	}()
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testutil.WaitFor(t, 60*time.Second, "the sort task to end", func() (bool, string) {
		st, err := c.Stats(t.Context())
		if err != nil {
			return false, err.Error()
		}
		s := st.Queues[q]
		return s.Completed+s.Dead == 1, fmt.Sprintf("pending %d active %d", s.Pending, s.Active)
	})
	if st, _ := c.Stats(t.Context()); st.Queues[q].Dead == 1 {
		dead, _ := c.DeadLetters(t.Context(), q, 1)
		t.Fatalf("sort task died: %+v", dead)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("worker exit %d", code)
	}
	if got, want := sortTestChecksum(t, out), sortTestChecksum(t, in); got.Checksum != want.Checksum || got.Records != 20000 {
		t.Errorf("output %d records checksum %x, want 20000 and %x", got.Records, got.Checksum, want.Checksum)
	}
}

// A worker started before its Redis waits for it (taskq.ErrRedisUnreachable
// on a closed port) until signalled, then exits 0 (or until
// --redis-lost-after, 1 min by default: TestQueueWorkerRedisLostAfterFlag);
// a bad address is a configuration error that fails at once.
func TestQueueWorkerWaitsOutUnreachableRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var logs testutil.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, Env{Args: []string{"queue", "worker", "--redis", addr}, Stdout: io.Discard, Stderr: io.Discard,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	}()
	testutil.WaitFor(t, 10*time.Second, "the worker to wait for Redis", func() (bool, string) {
		s := logs.String()
		return strings.Contains(s, "redis unreachable, waiting for it"), s
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("worker signalled while waiting for Redis: exit %d, want 0\n%s", code, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not return after its context ended")
	}

	// With --redis-lost-after it gives up: exit 1, naming the address.
	var lostb bytes.Buffer
	t0 := time.Now()
	code := Execute(t.Context(), Env{Args: []string{"queue", "worker", "--redis", addr, "--redis-lost-after", "1s"}, Stdout: io.Discard, Stderr: &lostb,
		Logger: slog.New(slog.DiscardHandler)})
	if code != 1 || !strings.Contains(lostb.String(), addr) || !strings.Contains(lostb.String(), "unreachable for") || time.Since(t0) > 10*time.Second {
		t.Errorf("--redis-lost-after 1s: exit %d after %v, %q; want exit 1 naming %s", code, time.Since(t0), lostb.String(), addr)
	}

	var errb bytes.Buffer
	code = Execute(t.Context(), Env{Args: []string{"queue", "worker", "--redis", "redis://%zz"}, Stdout: io.Discard, Stderr: &errb})
	if code == 0 || !strings.Contains(errb.String(), "redis address") {
		t.Errorf("bad address: exit %d, %q; want a configuration error naming the address", code, errb.String())
	}
}

// The inspector commands end to end: tasks list/get/cancel/run/delete with
// --json, and pause/resume shown by stats.
func TestQueueTasksAndPauseCommands(t *testing.T) {
	addr := os.Getenv("GANTRY_TEST_REDIS")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	q := fmt.Sprintf("clitasks-%d", os.Getpid())
	t.Cleanup(func() {
		if c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr}); err == nil {
			c.Purge(context.WithoutCancel(t.Context()), q)
			c.Close()
		}
	})
	run := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := Execute(t.Context(), Env{Args: args, Stdout: &out, Stderr: &errb})
		return out.String() + errb.String(), code
	}
	must := func(args ...string) string {
		t.Helper()
		out, code := run(args...)
		if code != 0 {
			t.Fatalf("gantry %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	must("queue", "enqueue", "--redis", addr, "--queue", q, "--tenant", "t1", "--type", "noop", "--count", "3")
	must("queue", "enqueue", "--redis", addr, "--queue", q, "--tenant", "t2", "--type", "noop", "--in", "1h")
	var page taskq.TaskPage
	if err := json.Unmarshal([]byte(must("queue", "tasks", "list", "--redis", addr, "--queue", q, "--json", "--limit", "2")), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 2 || page.Next == "" || page.Tasks[0].State != "pending" || page.Tasks[0].Tenant != "t1" {
		t.Fatalf("first page: %+v", page)
	}
	id := page.Tasks[0].ID
	var d taskq.TaskDetail
	if err := json.Unmarshal([]byte(must("queue", "tasks", "get", id, "--redis", addr, "--json")), &d); err != nil || d.Queue != q || d.Type != "noop" {
		t.Fatalf("get: %+v, %v", d, err)
	}
	if out := must("queue", "tasks", "cancel", id, "--redis", addr); !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel printed %q", out)
	}
	if out, code := run("queue", "tasks", "cancel", id, "--redis", addr); code == 0 || !strings.Contains(out, "is cancelled") {
		t.Fatalf("second cancel: exit %d, %s", code, out)
	}
	if out := must("queue", "tasks", "list", "--redis", addr, "--queue", q, "--state", "cancelled"); !strings.Contains(out, id) || !strings.Contains(out, "ended 20") {
		t.Fatalf("cancelled list lacks %s, or its WHEN does not say ended:\n%s", id, out)
	}
	var sched taskq.TaskPage
	json.Unmarshal([]byte(must("queue", "tasks", "list", "--redis", addr, "--queue", q, "--state", "scheduled", "--json")), &sched)
	if len(sched.Tasks) != 1 {
		t.Fatalf("scheduled: %+v", sched)
	}
	must("queue", "tasks", "run", sched.Tasks[0].ID, "--redis", addr)
	must("queue", "tasks", "delete", id, "--redis", addr)
	if out, code := run("queue", "tasks", "get", id, "--redis", addr); code == 0 || !strings.Contains(out, "not found") {
		t.Fatalf("get after delete: exit %d, %s", code, out)
	}
	if out, code := run("queue", "tasks", "list", "--redis", addr, "--queue", q, "--state", "sleeping"); code == 0 || !strings.Contains(out, "want one of") {
		t.Fatalf("bad state: exit %d, %s", code, out)
	}

	must("queue", "pause", "--redis", addr, "--queue", q, "--tenant", "t2", "--for", "1h")
	must("queue", "pause", "--redis", addr, "--queue", q)
	out := must("queue", "stats", "--redis", addr)
	if !strings.Contains(out, q+" [paused]") || !strings.Contains(out, "tenant t2 (w=1) [paused until") {
		t.Fatalf("stats does not show the pauses:\n%s", out)
	}
	var paused taskq.Stats
	if err := json.Unmarshal([]byte(must("queue", "stats", "--redis", addr, "--json")), &paused); err != nil {
		t.Fatal(err)
	}
	if qs := paused.Queues[q]; !qs.PausedUntil.Equal(taskq.Indefinitely) || qs.Tenants["t2"].PausedUntil.Before(time.Now().Add(59*time.Minute)) {
		t.Fatalf("stats --json of the pauses: queue until %v, t2 until %v", qs.PausedUntil, qs.Tenants["t2"].PausedUntil)
	}

	// Limits: set, shown by list and stats, refused when nonsense, cleared.
	must("queue", "limit", "set", "--redis", addr, "--queue", q, "--tenant", "t2", "--rate", "1200/m", "--max-active", "3", "--weight", "2")
	must("queue", "limit", "set", "--redis", addr, "--queue", q, "--max-active", "50")
	if out := must("queue", "limit", "list", "--redis", addr, "--queue", q); !strings.Contains(out, "20/s burst 1, max-active 3, weight 2") || !strings.Contains(out, "(queue)") {
		t.Fatalf("limit list:\n%s", out)
	}
	var lims []taskq.LimitInfo
	if err := json.Unmarshal([]byte(must("queue", "limit", "list", "--redis", addr, "--queue", q, "--json")), &lims); err != nil || len(lims) != 2 || lims[1].Tenant != "t2" || lims[1].Rate != 20 || lims[1].MaxActive != 3 {
		t.Fatalf("limit list --json: %+v %v", lims, err)
	}
	if out := must("queue", "stats", "--redis", addr); !strings.Contains(out, "tenant t2 (w=2) [paused until ") || !strings.Contains(out, "] [20/s burst 1, max-active 3]") || !strings.Contains(out, q+" [paused] [max-active 50]") {
		t.Fatalf("stats does not show the limit:\n%s", out)
	}
	for _, bad := range [][]string{{"--rate", "fast"}, {"--weight", "2"}, {"--burst", "3"}, {}} {
		args := append([]string{"queue", "limit", "set", "--redis", addr, "--queue", q}, bad...)
		if out, code := run(args...); code == 0 {
			t.Errorf("limit set %v accepted: %s", bad, out)
		}
	}
	must("queue", "limit", "clear", "--redis", addr, "--queue", q, "--tenant", "t2")
	if out, code := run("queue", "limit", "clear", "--redis", addr, "--queue", q, "--tenant", "t2"); code == 0 || !strings.Contains(out, "has no limit") {
		t.Errorf("clearing a limit twice: exit %d, %s", code, out)
	}
	must("queue", "limit", "clear", "--redis", addr, "--queue", q, "--all")
	if out := must("queue", "limit", "list", "--redis", addr, "--queue", q); !strings.Contains(out, "no limits") {
		t.Errorf("after clear --all:\n%s", out)
	}

	must("queue", "resume", "--redis", addr, "--queue", q)
	must("queue", "resume", "--redis", addr, "--queue", q, "--tenant", "t2")
	var st taskq.Stats
	if err := json.Unmarshal([]byte(must("queue", "stats", "--redis", addr, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if qs := st.Queues[q]; !qs.PausedUntil.IsZero() || !qs.Tenants["t2"].PausedUntil.IsZero() {
		t.Fatalf("stats after resume still shows a pause: %+v", qs)
	}
}

// queue cron add/list/remove: the entry as given, its next tick, refusals.
func TestQueueCronCommands(t *testing.T) {
	addr := os.Getenv("GANTRY_TEST_REDIS")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	name := fmt.Sprintf("clicron-%d", os.Getpid())
	run := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := Execute(t.Context(), Env{Args: args, Stdout: &out, Stderr: &errb})
		return out.String() + errb.String(), code
	}
	t.Cleanup(func() { run("queue", "cron", "remove", "--redis", addr, name) })
	if out, code := run("queue", "cron", "add", "--redis", addr, "--name", name, "--spec", "30 0 2 * * *", "--tz", "Asia/Tokyo",
		"--queue", "reports", "--type", "report", "--tenant", "acme", "--payload", `{"k":1}`, "--missed", "once"); code != 0 {
		t.Fatalf("cron add: exit %d: %s", code, out)
	}
	out, code := run("queue", "cron", "list", "--redis", addr, "--json")
	var list []taskq.CronInfo
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("cron list --json: exit %d: %s", code, out)
	}
	var e *taskq.CronInfo
	for i := range list {
		if list[i].Name == name {
			e = &list[i]
		}
	}
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	if e == nil || e.Tenant != "acme" || e.Missed != taskq.MissedOnce || string(e.Payload) != `{"k":1}` {
		t.Fatalf("cron list: %+v", e)
	}
	if n := e.Next.In(tokyo); n.Hour() != 2 || n.Minute() != 0 || n.Second() != 30 || !n.After(time.Now()) || time.Until(n) > 24*time.Hour {
		t.Errorf("next tick %v, want the next 02:00:30 in Tokyo", n)
	}
	// The table shows the tick in the entry's zone, named.
	if out, code := run("queue", "cron", "list", "--redis", addr); code != 0 || !strings.Contains(out, e.Next.In(tokyo).Format("2006-01-02")+" 02:00:30 JST") {
		t.Errorf("cron list: exit %d, want the next tick as 02:00:30 JST:\n%s", code, out)
	}
	for _, bad := range [][]string{
		{"--name", name + "x", "--spec", "61 * * * *", "--queue", "q", "--type", "t"},
		{"--name", name + "x", "--spec", "@every 1s", "--queue", "q"},
		{"--name", name + "x", "--spec", "@every 1s", "--queue", "q", "--type", "t", "--payload", "{bad"},
	} {
		if out, code := run(append([]string{"queue", "cron", "add", "--redis", addr}, bad...)...); code == 0 {
			t.Errorf("cron add %v accepted: %s", bad, out)
		}
	}
	if out, code := run("queue", "cron", "remove", "--redis", addr, name); code != 0 {
		t.Fatalf("cron remove: %d %s", code, out)
	}
	if out, code := run("queue", "cron", "remove", "--redis", addr, name); code == 0 || !strings.Contains(out, "no entry") {
		t.Errorf("removing twice: exit %d: %s", code, out)
	}
}

// `queue enqueue --wait-replicas 1` against a Redis without a replica
// fails (the task is not on a replica) and says so; a redis-sentinel
// address without a master name is refused before any connection.
func TestQueueEnqueueWaitReplicasAndSentinelAddress(t *testing.T) {
	red := testutil.StartRedis(t)
	run := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := Execute(t.Context(), Env{Args: args, Stdout: &out, Stderr: &errb})
		return out.String() + errb.String(), code
	}
	if out, code := run("queue", "enqueue", "--redis", red.Addr(), "--type", "noop", "--wait-replicas", "1"); code == 0 || !strings.Contains(out, "replicas") {
		t.Errorf("--wait-replicas 1 without a replica: exit %d, %s", code, out)
	}
	if out, code := run("queue", "enqueue", "--redis", red.Addr(), "--type", "noop"); code != 0 {
		t.Errorf("without --wait-replicas: exit %d, %s", code, out)
	}
	if out, code := run("queue", "enqueue", "--redis", "redis-sentinel://127.0.0.1:1", "--type", "noop"); code == 0 || !strings.Contains(out, "master name") {
		t.Errorf("a sentinel address without a master name: exit %d, %s", code, out)
	}
}
