package taskq

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

// Three `gantry queue worker` processes, one "@every 1s" entry for 10 s:
// 10±1 tasks, not 30. An entry added while they run starts within a tick;
// a removed one stops within a tick; cron list shows the last and next
// tick.
func TestCronOncePerTickAcrossWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("three worker processes for 15 s")
	}
	t.Parallel() // waits on wall-clock cron ticks (main_test.go)
	bin := testutil.GantryBinary(t)
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	ctx := t.Context()
	for range 3 {
		startWorkerProc(t, bin, "--redis", addr, "--queues", "ticks,late", "--concurrency", "4")
	}
	time.Sleep(time.Second) // real time: let the three schedulers start before the entry exists
	completed := func(q string) int64 { return queueStats(t, c, q).Completed }
	if _, err := c.CronAdd(ctx, CronEntry{Name: "tick", Spec: "@every 1s", Queue: "ticks", Type: "noop"}); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	time.Sleep(5 * time.Second) // real time: the ticks are wall-clock seconds
	// Added while they run: within a tick (plus a poll).
	if _, err := c.CronAdd(ctx, CronEntry{Name: "late", Spec: "*/1 * * * * *", Queue: "late", Type: "noop", Tenant: "t9"}); err != nil {
		t.Fatal(err)
	}
	lateAdded := time.Now()
	waitFor(t, 3*time.Second, "the entry added while running enqueued", func() bool { return completed("late") >= 1 })
	t.Logf("first task of the added entry %v after the add", time.Since(lateAdded).Round(10*time.Millisecond))
	time.Sleep(time.Until(added.Add(10 * time.Second))) // real time: 10 s of ticks
	if ok, err := c.CronRemove(ctx, "tick"); err != nil || !ok {
		t.Fatalf("remove: %v %v", ok, err)
	}
	removed := time.Now()
	time.Sleep(2500 * time.Millisecond) // real time: a removed entry must stay quiet past a tick
	n := completed("ticks")
	t.Logf("10 s of @every 1s on three workers: %d tasks", n)
	if n < 9 || n > 11 {
		t.Fatalf("%d tasks in 10 s of @every 1s across three schedulers, want 10±1", n)
	}
	time.Sleep(2 * time.Second) // real time: nothing more after the removal
	if m := completed("ticks"); m != n {
		t.Fatalf("%d more tasks after the entry was removed (%v ago)", m-n, time.Since(removed))
	}
	list, err := c.CronList(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "late" || list[0].Tenant != "t9" {
		t.Fatalf("cron list: %+v %v", list, err)
	}
	if l := list[0]; l.Last.IsZero() || time.Since(l.Last) > 2*time.Second || !l.Next.After(time.Now()) || time.Until(l.Next) > time.Second {
		t.Fatalf("cron list: last %v, next %v", l.Last, l.Next)
	}
}

// MissedOnce enqueues the latest tick missed while no scheduler ran, once;
// MissedSkip waits for the next. A spec that does not parse is refused.
func TestCronMissedTicks(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	r := openRDB(t, addr)
	ctx := t.Context()
	q := uniq(t, "cron-missed")
	hourAgo := time.Now().Add(-time.Hour).Truncate(time.Minute)
	for _, e := range []CronEntry{
		{Name: q + "-once", Spec: "@every 1m", Queue: q, Type: "noop", Tenant: "once", Missed: MissedOnce},
		{Name: q + "-skip", Spec: "@every 1m", Queue: q, Type: "noop", Tenant: "skip"},
	} {
		if _, err := c.CronAdd(ctx, e); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CronRemove(context.WithoutCancel(ctx), e.Name) })
		if err := r.CronTicked(ctx, e.Name, hourAgo.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // two schedulers: still one task
		s, err := NewScheduler(SchedulerConfig{Redis: addr})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.pass(ctx); err != nil {
			t.Fatal(err)
		}
		s.c.Close()
	}
	st := queueStats(t, c, q)
	if st.Pending != 1 {
		t.Fatalf("after a missed hour: %d pending, want the one latest tick of the once entry", st.Pending)
	}
	for _, bad := range []CronEntry{
		{Name: "b1", Spec: "every minute", Queue: q, Type: "noop"},
		{Name: "b2", Spec: "@every 10ms", Queue: q, Type: "noop"},
		{Name: "b3", Spec: "* * * * *", Queue: q, Type: "noop", TZ: "Mars/Olympus"},
		{Name: "b4", Spec: "* * * * *", Queue: q, Type: "noop", Missed: "twice"},
		{Name: "b5", Spec: "0 0 31 2 *", Queue: q, Type: "noop"}, // 31 February: never
	} {
		if _, err := c.CronAdd(ctx, bad); err == nil || !strings.Contains(err.Error(), "invalid task") {
			t.Errorf("%+v: %v, want refused", bad, err)
		}
	}
}

// An entry whose spec never fires (31 February), stored before CronAdd
// refused such specs, enqueues nothing: the parser answers the zero time,
// which is not a tick that is due.
func TestCronNeverFiringEntryStaysQuiet(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	r := openRDB(t, addr)
	ctx := t.Context()
	q := uniq(t, "cron-never")
	e := CronEntry{Name: q, Spec: "0 0 31 2 *", Queue: q, Type: "noop", Missed: MissedOnce}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CronPut(ctx, e.Name, string(b)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CronRemove(context.WithoutCancel(ctx), e.Name) })
	if err := r.CronTicked(ctx, e.Name, time.Now().Add(-time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	s, err := NewScheduler(SchedulerConfig{Redis: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.c.Close()
	for range 3 {
		next, err := s.pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !next.IsZero() {
			t.Errorf("next tick %v, want none", next)
		}
	}
	if st := queueStats(t, c, q); st.Pending != 0 {
		t.Errorf("%d tasks enqueued by a spec that never fires", st.Pending)
	}
}
