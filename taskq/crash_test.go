package taskq

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

type workerProc struct {
	cmd *exec.Cmd
	log *bytes.Buffer
}

func startWorkerProc(t *testing.T, bin string, args ...string) *workerProc {
	t.Helper()
	var buf bytes.Buffer
	cmd := exec.Command(bin, append([]string{"queue", "worker"}, args...)...)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &workerProc{cmd: cmd, log: &buf}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// TestCrashKill9 runs 50,000 tasks on two worker processes, SIGKILLs one of
// them midway and restarts it: every task completes, none is lost, and the
// re-runs of the tasks the killed worker held are reported as duplicates.
func TestCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test")
	}
	bin := testutil.GantryBinary(t)
	red := testutil.StartRedis(t, "--appendonly", "no")
	addr := red.Addr()
	c := newClient(t, addr)
	ctx := t.Context()
	const total = 50_000
	q := "crash"
	enqueueTenant(t, c, q, "a", 0, total/2, Queue(q))
	tasks := make([]*Task, total/2)
	for i := range tasks {
		tasks[i] = NewTask("sleep", []byte(`{"ms":1}`), Queue(q), Tenant("b"))
	}
	if _, err := c.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	args := []string{"--redis", addr, "--queues", q, "--concurrency", "16", "--lease", "2s"}
	a := startWorkerProc(t, bin, args...)
	b := startWorkerProc(t, bin, args...)
	waitFor(t, 120*time.Second, "a third of the tasks done", func() bool {
		return queueStats(t, c, q).Completed >= total/3
	})
	held := queueStats(t, c, q).Active
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.cmd.Wait()
	t.Logf("killed worker 1 with SIGKILL; %d tasks were active (both workers)", held)
	a2 := startWorkerProc(t, bin, args...)
	waitFor(t, 180*time.Second, "all tasks completed", func() bool {
		st := queueStats(t, c, q)
		return st.Completed == total && st.Pending == 0 && st.Active == 0
	})
	for _, p := range []*workerProc{b, a2} {
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("worker exit after SIGTERM: %v\n%s", err, p.log)
		}
	}
	st := queueStats(t, c, q)
	left, err := taskRecords(t, addr, "crash")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("completed %d, processed %d, duplicates %d, reaped %d, dead %d, retry %d, task records left %d",
		st.Completed, st.ProcessedTotal, st.DuplicatesTotal, st.ReapedTotal, st.Dead, st.Retry, left)
	if st.Dead != 0 || st.Retry != 0 || st.FailedTotal != 0 || left != 0 {
		t.Errorf("dead %d retry %d failed %d records left %d; want all 0", st.Dead, st.Retry, st.FailedTotal, left)
	}
	if st.DuplicatesTotal == 0 || st.ReapedTotal == 0 {
		t.Errorf("duplicates %d reaped %d: the killed worker's tasks should have been re-delivered and reported", st.DuplicatesTotal, st.ReapedTotal)
	}
	if st.Tenants["a"].Completed != total/2 || st.Tenants["b"].Completed != total/2 {
		t.Errorf("tenant completions a=%d b=%d, want %d each", st.Tenants["a"].Completed, st.Tenants["b"].Completed, total/2)
	}
}

// TestWorkflowsSurviveKill9: 1,000 workflows, 500 chains of 5 and 500
// chords of 100 members (echo tasks, each node's result its parents'
// results then its own text: 53,000 nodes), on two worker processes, one
// SIGKILLed at a random moment while they run and restarted: every
// workflow completes, every chain's last result is the five texts in
// order and every callback's the hundred members' in order, each once (a
// callback run twice would not change it, but one released twice would be
// a second task: each chord has one callback, and no task dies). A node
// run before one of its parents succeeded could not produce its result:
// echo refuses a parent without a result (SkipRetry: it would be dead).
func TestWorkflowsSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test")
	}
	bin := testutil.GantryBinary(t)
	red := testutil.StartRedis(t, "--appendonly", "no")
	addr := red.Addr()
	c := newClient(t, addr)
	ctx := t.Context()
	q := "wfcrash"
	echo := func(s string) *Task { return NewTask("echo", []byte(`{"text":"`+s+`"}`)) }
	var last []string
	var want []string
	const chains, chords, members = 500, 500, 100
	for i := range chains {
		steps := make([]*Task, 5)
		for j := range steps {
			steps[j] = echo(string(rune('a' + j)))
		}
		info, err := c.EnqueueWorkflow(ctx, Chain(steps...), Queue(q), Tenant(fmt.Sprint("t", i%4)))
		if err != nil {
			t.Fatal(err)
		}
		last, want = append(last, info.Tasks["5"]), append(want, "abcde")
	}
	for range chords {
		group := make([]*Task, members)
		var all strings.Builder
		for j := range group {
			text := fmt.Sprintf("%02d,", j)
			group[j] = echo(text)
			all.WriteString(text)
		}
		info, err := c.EnqueueWorkflow(ctx, Chord(group, echo("!")), Queue(q))
		if err != nil {
			t.Fatal(err)
		}
		last, want = append(last, info.Tasks["callback"]), append(want, all.String()+"!")
	}
	args := []string{"--redis", addr, "--queues", q, "--concurrency", "8", "--lease", "2s"}
	a := startWorkerProc(t, bin, args...)
	b := startWorkerProc(t, bin, args...)
	const total = chains*5 + chords*(members+1)
	at := total/10 + rand.IntN(total*7/10) // the kill: after 10–80% of the nodes
	t.Logf("killing one worker after %d of %d nodes completed", at, total)
	waitFor(t, 180*time.Second, "the kill's moment", func() bool { return queueStats(t, c, q).Completed >= int64(at) })
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.cmd.Wait()
	a2 := startWorkerProc(t, bin, args...)
	waitFor(t, 180*time.Second, "every node completed", func() bool {
		st := queueStats(t, c, q)
		return st.Completed == total && st.Pending == 0 && st.Active == 0 && st.Scheduled == 0
	})
	in, err := NewInspector(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for i, id := range last {
		d, err := in.Get(ctx, q, id)
		if err != nil || d.State != StateCompleted || string(d.Result) != want[i] {
			t.Fatalf("workflow %d's last node: %s %q, %v; want completed with %q", i, d.State, d.Result, err, want[i])
		}
	}
	st := queueStats(t, c, q)
	t.Logf("completed %d, duplicates %d, reaped %d, dead %d", st.Completed, st.DuplicatesTotal, st.ReapedTotal, st.Dead)
	if st.Dead != 0 || st.Cancelled != 0 {
		t.Fatalf("dead %d, cancelled %d; want 0", st.Dead, st.Cancelled)
	}
	for _, p := range []*workerProc{b, a2} {
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.cmd.Wait()
	}
}

// TestAggregationSurvivesKill9: 10,000 tasks in 100 groups (max size 30,
// grace 1 s: batches of 30, 30, 30 and 10 per group) first served by a
// `gantry queue worker` process whose batches sleep a minute (the built-in
// sleep, 4 at a time). Once it holds 4 batches it is SIGKILLed, and a
// worker in this process, whose handler records every batch's members,
// takes over: every member is handed over in exactly one batch that
// completed — those of the 4 batches the dead worker held too, taken back
// after its lease — and nothing is left (no task record, no batch dead).
func TestAggregationSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test")
	}
	bin := testutil.GantryBinary(t)
	red := testutil.StartRedis(t, "--appendonly", "no")
	addr := red.Addr()
	c := newClient(t, addr)
	ctx := t.Context()
	q := "groupcrash"
	a := startWorkerProc(t, bin, "--redis", addr, "--queues", q, "--concurrency", "4", "--lease", "2s")
	p := GroupPolicy{MaxSize: 30, Grace: time.Second, MaxDelay: time.Minute}
	for i := range 10000 {
		id := fmt.Sprint("m", i)
		if _, err := c.Enqueue(ctx, NewTask("sleep", []byte(`{"ms":60000}`)), Queue(q), TaskID(id), Group(fmt.Sprint("g", i%100), p)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "the worker process holding 4 batches", func() bool { return queueStats(t, c, q).Active == 4 })
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.cmd.Wait()

	var mu sync.Mutex
	seen, batches := map[string]int{}, 0
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 8})
	w.Handle("sleep", func(_ context.Context, tk *Task) error {
		mu.Lock()
		defer mu.Unlock()
		batches++
		for _, m := range tk.Batch() {
			seen[m.ID()]++
		}
		return nil
	})
	runWorker(t, w)
	waitFor(t, 120*time.Second, "every batch completed", func() bool {
		st := queueStats(t, c, q)
		return st.Completed == 400 && st.Pending == 0 && st.Active == 0 && st.Scheduled == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 10000 || batches != 400 {
		t.Fatalf("%d members in %d batches handed over; want 10000 in 400", len(seen), batches)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("member %s handed over %d times", id, n)
		}
	}
	st := queueStats(t, c, q)
	left, err := taskRecords(t, addr, q)
	if err != nil || left != 0 || st.Dead != 0 || st.ReapedTotal < 4 {
		t.Fatalf("after every batch: %d task records left (%v), %d dead, %d reaped; want none left, none dead, the 4 held taken back", left, err, st.Dead, st.ReapedTotal)
	}
}
