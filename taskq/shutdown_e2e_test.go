package taskq

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

// TestWorkerProcessShutdownTimeout: `gantry queue worker` after a SIGTERM
// lets a running task finish for its whole --shutdown-timeout, even past the
// process's default 15 s deadline, and exits 0 with the task completed; with
// --shutdown-timeout 0 it cancels the task at once and gives it back.
func TestWorkerProcessShutdownTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level: a task of 17 s outlasts the default deadline")
	}
	bin := testutil.GantryBinary(t)
	red := testutil.StartRedis(t, "--appendonly", "no")
	addr := red.Addr()
	for _, tc := range []struct {
		name, timeout string
		taskMS        int
		completed     bool // else: back in pending
		within        time.Duration
	}{
		{"past-the-default-deadline", "40s", 17_000, true, 35 * time.Second},
		{"zero-cancels-at-once", "0s", 60_000, false, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, addr)
			q := "shutdown-" + tc.timeout
			if _, err := c.Enqueue(t.Context(), NewTask("sleep", []byte(`{"ms":`+strconv.Itoa(tc.taskMS)+`}`), Queue(q))); err != nil {
				t.Fatal(err)
			}
			p := startWorkerProc(t, bin, "--redis", addr, "--queues", q, "--no-steal", "--no-cron", "--shutdown-timeout", tc.timeout)
			waitFor(t, 30*time.Second, "the task running", func() bool { return queueStats(t, c, q).Active == 1 })
			signalled := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			err := p.cmd.Wait()
			took := time.Since(signalled)
			if err != nil {
				t.Fatalf("worker exit after SIGTERM (%v later): %v\n%s", took.Round(time.Millisecond), err, p.log)
			}
			if took > tc.within {
				t.Errorf("the worker took %v to exit, want at most %v", took.Round(time.Millisecond), tc.within)
			}
			st := queueStats(t, c, q)
			if tc.completed && (st.Completed != 1 || st.Pending != 0) || !tc.completed && (st.Pending != 1 || st.Completed != 0) {
				t.Errorf("after the exit: completed %d pending %d active %d; want the task %s", st.Completed, st.Pending, st.Active,
					map[bool]string{true: "completed", false: "back in pending"}[tc.completed])
			}
			if st.Active != 0 {
				t.Errorf("%d tasks still held after the worker exited", st.Active)
			}
		})
	}
}
