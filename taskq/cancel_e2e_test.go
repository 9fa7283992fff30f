package taskq

import (
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

// Cancel across two `gantry queue worker` processes: 1,000 running `sleep`
// tasks, 500 of them cancelled; each worker's log line "task cancelled while
// running" (written when the handler has returned) comes within 1 s of its
// cancel; none is retried; the other 500 complete.
func TestCancelAcrossWorkerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("two worker processes, 1,000 tasks")
	}
	// Not parallel: it measures a 1 s bound under its own load (main_test.go).
	bin := testutil.GantryBinary(t)
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	in := newInspector(t, addr)
	q := "cancel"
	args := []string{"--redis", addr, "--queues", q, "--concurrency", "600", "--no-steal"}
	procs := []*workerProc{startWorkerProc(t, bin, args...), startWorkerProc(t, bin, args...)}
	var all []string
	tasks := make([]*Task, 1000)
	for i := range tasks {
		tasks[i] = NewTask("sleep", []byte(`{"ms":6000}`), Queue(q))
	}
	infos, err := c.EnqueueBatch(t.Context(), tasks)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		all = append(all, info.ID)
	}
	waitFor(t, 30*time.Second, "1,000 sleeps running", func() bool { return queueStats(t, c, q).Active == 1000 })
	cancelled := all[:500]
	asked := map[string]time.Time{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range cancelled {
		wg.Go(func() {
			if _, err := in.Cancel(t.Context(), q, id, "test"); err != nil {
				t.Errorf("cancel %s: %v", id, err)
			}
			// Timed from the Cancel's return (the cancel recorded and
			// published), not its call: 500 calls at once queue in the
			// client first, up to 1.3 s on a loaded CI run.
			now := time.Now()
			mu.Lock()
			asked[id] = now
			mu.Unlock()
		})
	}
	wg.Wait()
	waitFor(t, 30*time.Second, "the other 500 to complete", func() bool {
		st := queueStats(t, c, q)
		return st.Completed == 500 && st.Active == 0
	})
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("worker exit: %v\n%s", err, p.log)
		}
	}
	line := regexp.MustCompile(`time=(\S+) level=INFO msg="taskq: task cancelled while running" queue=` + q + ` id=(\w+)`)
	stoppedAt := map[string]time.Time{}
	for _, p := range procs {
		for _, m := range line.FindAllStringSubmatch(p.log.String(), -1) {
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				t.Fatal(err)
			}
			stoppedAt[m[2]] = at
		}
	}
	var worst time.Duration
	for _, id := range cancelled {
		at, ok := stoppedAt[id]
		if !ok {
			t.Fatalf("no worker logged stopping cancelled task %s", id)
		}
		// The log's clock has millisecond resolution: allow that much.
		worst = max(worst, at.Sub(asked[id].Truncate(time.Millisecond)))
	}
	t.Logf("%d cancelled handlers stopped; the slowest %v after its cancel", len(stoppedAt), worst)
	if worst > time.Second {
		t.Fatalf("a cancelled handler stopped %v after its cancel, want within 1s", worst)
	}
	st := queueStats(t, c, q)
	if st.Cancelled != 500 || st.Completed != 500 || st.Retry != 0 || st.Pending != 0 || st.Dead != 0 || st.DuplicatesTotal != 0 {
		t.Fatalf("after: %+v; want 500 cancelled, 500 completed, nothing retried or rerun", st)
	}
}
