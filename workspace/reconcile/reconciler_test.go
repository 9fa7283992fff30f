package reconcile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/handoff"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/memstore"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/urgency"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// testStore is every store method the reconciler tests drive: what the
// reconciler and monitor use, and the user's writes. store.Store and
// memstore.Store have it.
type testStore interface {
	ReconcilerStore
	singletons.MonitorStore
	Create(ctx context.Context, n workspace.NewWorkspace, now time.Time) (workspace.Workspace, error)
	SetDesired(ctx context.Context, id string, desired workspace.Status, now time.Time) (workspace.Workspace, error)
	Recover(ctx context.Context, id string, now time.Time) (workspace.Workspace, error)
	Touch(ctx context.Context, id string, now time.Time) error
	List(ctx context.Context) ([]workspace.Workspace, error)
}

var (
	_ testStore = (*store.Store)(nil)
	_ testStore = (*memstore.Store)(nil)
)

// recBackends are the stores the reconciler suite runs on: the in-memory
// fake and both databases.
var recBackends = []struct {
	Name string
	open func(testing.TB) testStore
}{
	{"mem", func(testing.TB) testStore { return memstore.New() }},
	{"sqlite", func(t testing.TB) testStore { return wstest.OpenStore(t, storetest.SQLiteDSN(t)) }},
	{"postgres", func(t testing.TB) testStore { return wstest.OpenStore(t, storetest.PostgresDSN(t)) }},
}

type harness struct {
	st   testStore
	fake *fake.Provider
	rec  *Reconciler
	stop func()
}

// startHarness runs a reconciler and a monitor over st with the fake
// provider, fast intervals and the given hints.
func startHarness(t testing.TB, st testStore, fk *fake.Provider, hb hints.Bus, cfg Config) *harness {
	t.Helper()
	if cfg.Interval == 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	return startHarnessMon(t, st, fk, hb, cfg, singletons.MonitorConfig{Interval: cfg.Interval})
}

// startHarnessMon is startHarness with the monitor's own configuration.
func startHarnessMon(t testing.TB, st testStore, fk *fake.Provider, hb hints.Bus, cfg Config, mcfg singletons.MonitorConfig) *harness {
	t.Helper()
	return startHarnessWith(t, st, fk, hb, cfg, mcfg, nil)
}

// startHarnessWith is startHarnessMon with setup run on the reconciler
// before it starts (the benchmark's pool baseline).
func startHarnessWith(t testing.TB, st testStore, fk *fake.Provider, hb hints.Bus, cfg Config, mcfg singletons.MonitorConfig, setup func(*Reconciler)) *harness {
	t.Helper()
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = 20 * time.Millisecond
	}
	if cfg.Handoff == nil { // as the server wires them: one mailbox for both
		cfg.Handoff = handoff.New()
	}
	if cfg.Gate == nil { // the reconciler's own; a test whose store waits too passes openGated's
		cfg.Gate = urgency.NewGate(0)
	}
	mcfg.Handoff = cfg.Handoff
	rec, err := NewReconciler(cfg, st, fk, fk, hb)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(rec)
	}
	mon := singletons.NewHealthMonitor(mcfg, st, fk, fk, hb)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); rec.Run(ctx) }()
	go func() { defer wg.Done(); mon.Run(ctx) }()
	if ph, ok := hb.(*hints.Postgres); ok {
		wg.Add(1)
		go func() { defer wg.Done(); ph.Run(ctx) }()
	}
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return &harness{st: st, fake: fk, rec: rec, stop: stop}
}

func (h *harness) waitState(t testing.TB, id string, observed workspace.Status, d time.Duration) workspace.Workspace {
	t.Helper()
	var w workspace.Workspace
	wstest.WaitFor(t, d, fmt.Sprintf("%s to be %s", id, observed), func() (bool, string) {
		var err error
		w, err = h.st.Get(t.Context(), id)
		if err != nil {
			return false, err.Error()
		}
		return w.ObservedStatus == observed && (observed == workspace.Error || w.Operation == workspace.OpNone), wstest.Describe(w)
	})
	return w
}

func TestLifecycleWithFakeProvider(t *testing.T) {
	t.Parallel() // waits on the fake's calls and the 100 ms ticks (main_test.go)
	for _, b := range recBackends {
		for _, hintsOn := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/hints=%v", b.Name, hintsOn), func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				st := b.open(t)
				var hb hints.Bus = hints.Drop{}
				if hintsOn {
					hb = hints.NewLocal()
				}
				h := startHarness(t, st, fake.New(time.Millisecond), hb, Config{})
				w, err := st.Create(ctx, workspace.NewWorkspace{Name: "w", Desired: workspace.Running}, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				// A new workspace is provisioned, never ERROR (the seed's defect 1).
				h.waitState(t, w.ID, workspace.Running, 10*time.Second)
				st.SetDesired(ctx, w.ID, workspace.Pending, time.Now())
				got := h.waitState(t, w.ID, workspace.Pending, 10*time.Second)
				if got.ArchiveKey == "" {
					t.Fatal("archived without archive_key")
				}
				st.SetDesired(ctx, w.ID, workspace.Running, time.Now())
				h.waitState(t, w.ID, workspace.Running, 10*time.Second)
				for _, op := range []fake.Op{fake.Provision, fake.Start, fake.Stop, fake.Archive, fake.Restore} {
					want := 1
					if op == fake.Start {
						want = 2
					}
					if n := h.fake.Calls(w.ID, op); n != want {
						t.Errorf("%s calls = %d, want %d", op, n, want)
					}
				}
				if d := h.fake.Duplicates(); len(d) > 0 {
					t.Fatalf("duplicates: %v", d)
				}
				// Delete removes the row.
				st.SetDesired(ctx, w.ID, workspace.Deleted, time.Now())
				wstest.WaitFor(t, 10*time.Second, "row deleted", func() (bool, string) {
					_, err := st.Get(ctx, w.ID)
					return err != nil, fmt.Sprint(err)
				})
			})
		}
	}
}

func TestFailurePolicy(t *testing.T) {
	t.Parallel() // waits on backoffs and the STARTING timeout (main_test.go)
	for _, b := range recBackends {
		t.Run(b.Name, func(t *testing.T) {
			wstest.SkipShortBut(t, "mem")
			t.Parallel()
			testFailurePolicy(t, b.open(t))
		})
	}
}

func testFailurePolicy(t *testing.T, st testStore) {
	ctx := t.Context()
	fk := fake.New(0)
	// STARTING times out after 8 s: long enough that a loaded machine's slow
	// observation never turns a successful start into a timeout (and a
	// fifth call), short enough for the hung case below.
	h := startHarness(t, st, fk, hints.NewLocal(), Config{MaxRetries: 3, Timeouts: map[workspace.Operation]time.Duration{workspace.OpStarting: 8 * time.Second}})
	mk := func(name string) workspace.Workspace {
		w, err := st.Create(ctx, workspace.NewWorkspace{Name: name, Desired: workspace.Standby}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		h.waitState(t, w.ID, workspace.Standby, 10*time.Second)
		return w
	}

	// N = max failures: retried max times, converges, error_count reset.
	ok := mk("retries-ok")
	fk.Fail(fake.Start, ok.ID, 3)
	st.SetDesired(ctx, ok.ID, workspace.Running, time.Now())
	got := h.waitState(t, ok.ID, workspace.Running, 10*time.Second)
	if got.ErrorCount != 0 || got.ErrorInfo != nil || fk.Calls(ok.ID, fake.Start) != 4 {
		t.Fatalf("after 3 failures: %s, %d start calls (want 4)", wstest.Describe(got), fk.Calls(ok.ID, fake.Start))
	}

	// max+1 failures: ERROR RetryExceeded, no more calls.
	bad := mk("retries-exceeded")
	fk.Fail(fake.Start, bad.ID, 100)
	st.SetDesired(ctx, bad.ID, workspace.Running, time.Now())
	got = h.waitState(t, bad.ID, workspace.Error, 10*time.Second)
	if got.ErrorInfo == nil || got.ErrorInfo.Reason != "RetryExceeded" || !got.ErrorInfo.IsTerminal || got.ErrorCount != 4 {
		t.Fatalf("retry exceeded: %s", wstest.Describe(got))
	}
	calls := fk.Calls(bad.ID, fake.Start)
	time.Sleep(300 * time.Millisecond) // real time: several ticks pass and an ERROR workspace is skipped
	if n := fk.Calls(bad.ID, fake.Start); n != calls || n != 4 {
		t.Fatalf("start calls %d then %d, want 4 and no more", calls, n)
	}
	// recover brings it back.
	fk.Fail(fake.Start, bad.ID, 0)
	if _, err := st.Recover(ctx, bad.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	h.rec.hints.Publish(ctx, hints.ChanMonitor, bad.ID)
	h.waitState(t, bad.ID, workspace.Running, 10*time.Second)

	// A hung provider: ERROR Timeout.
	hung := mk("hung")
	fk.Hang(fake.Start, hung.ID, true)
	st.SetDesired(ctx, hung.ID, workspace.Running, time.Now())
	got = h.waitState(t, hung.ID, workspace.Error, 20*time.Second)
	if got.ErrorInfo == nil || got.ErrorInfo.Reason != "Timeout" || !got.ErrorInfo.IsTerminal {
		t.Fatalf("hung: %s", wstest.Describe(got))
	}
	fk.Hang(fake.Start, hung.ID, false)
	st.Recover(ctx, hung.ID, time.Now())
	h.rec.hints.Publish(ctx, hints.ChanMonitor, hung.ID)
	h.waitState(t, hung.ID, workspace.Running, 10*time.Second)

	// No failure, slow observation: never retried (the seed's defect 2).
	if n := fk.Calls(hung.ID, fake.Start); n != 2 {
		t.Fatalf("hung workspace start calls = %d, want 2 (one hung, one after recover)", n)
	}
}

// TestConvergesUnderRandomChanges: many workspaces, random desired states,
// injected failures; every one ends converged or in ERROR with a reason,
// and no provider call is ever duplicated.
func TestConvergesUnderRandomChanges(t *testing.T) {
	t.Parallel() // 50 workspaces: waits on the fake's calls and the backoffs (main_test.go)
	for _, b := range recBackends {
		t.Run(b.Name, func(t *testing.T) {
			wstest.SkipShortBut(t, "mem")
			t.Parallel()
			ctx := t.Context()
			st := b.open(t)
			fk := fake.New(time.Millisecond)
			h := startHarness(t, st, fk, hints.NewLocal(), Config{MaxRetries: 3})
			states := []workspace.Status{workspace.Pending, workspace.Standby, workspace.Running}
			var ids []string
			for i := range 50 {
				w, err := st.Create(ctx, workspace.NewWorkspace{Name: fmt.Sprint("w", i), Desired: states[i%3]}, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, w.ID)
				if i%7 == 0 {
					fk.Fail(fake.Start, w.ID, 2)
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 300 {
				id := ids[rng.IntN(len(ids))]
				st.SetDesired(ctx, id, states[rng.IntN(3)], time.Now())
				time.Sleep(2 * time.Millisecond) // real time: the changes land while steps run
			}
			wstest.WaitFor(t, 30*time.Second, "all converged", func() (bool, string) {
				all, _ := st.List(ctx)
				for _, w := range all {
					if w.ObservedStatus == workspace.Error {
						if w.ErrorInfo == nil || w.ErrorInfo.Reason == "" {
							return false, "ERROR without reason: " + wstest.Describe(w)
						}
						continue
					}
					if w.ObservedStatus != w.DesiredState || w.Operation != workspace.OpNone {
						return false, wstest.Describe(w)
					}
				}
				return true, ""
			})
			h.stop()
			if d := fk.Duplicates(); len(d) > 0 {
				t.Fatalf("%d duplicate calls: %v", len(d), d[:min(5, len(d))])
			}
		})
	}
}

// A command that ends right after its start is seen within seconds, not at
// the STARTING timeout: error info Exited with the exit status and the
// last output, a restart after the backoff, and ERROR once the retries are
// spent (the exit status kept) — on every store.
func TestCrashedStartIsReported(t *testing.T) {
	t.Parallel() // waits on exit polls and backoffs (main_test.go)
	for _, b := range recBackends {
		t.Run(b.Name, func(t *testing.T) {
			wstest.SkipShortBut(t, "mem")
			t.Parallel()
			st := b.open(t)
			ctx := t.Context()
			fk := fake.New(0)
			h := startHarness(t, st, fk, hints.NewLocal(), Config{MaxRetries: 2, RetryBackoff: 300 * time.Millisecond,
				Timeouts: map[workspace.Operation]time.Duration{workspace.OpStarting: 5 * time.Minute}})
			mk := func(name string) workspace.Workspace {
				w, err := st.Create(ctx, workspace.NewWorkspace{Name: name, Desired: workspace.Standby}, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				h.waitState(t, w.ID, workspace.Standby, 10*time.Second)
				return w
			}
			// Two crashes, then it runs: both visible, then cleared.
			flaky := mk("flaky")
			fk.Crash(flaky.ID, 2, "exit 3", 3)
			t0 := time.Now()
			st.SetDesired(ctx, flaky.ID, workspace.Running, time.Now())
			var seen workspace.Workspace
			wstest.WaitFor(t, 5*time.Second, "the first exit in error_info", func() (bool, string) {
				seen, _ = st.Get(ctx, flaky.ID)
				e := seen.ErrorInfo
				return e != nil && e.Reason == workspace.ReasonExited && e.ExitStatus == "exit 3" && strings.Contains(e.Output, "boom"), wstest.Describe(seen)
			})
			t.Logf("exit reported %v after the start was asked for", time.Since(t0).Round(time.Millisecond))
			got := h.waitState(t, flaky.ID, workspace.Running, 10*time.Second)
			// It runs; the last end and the count stay (the crash window).
			if e := got.ErrorInfo; e == nil || e.Reason != workspace.ReasonExited || got.ErrorCount != 2 || fk.Calls(flaky.ID, fake.Start) != 3 {
				t.Fatalf("after two crashes: %s, %d starts (want RUNNING, Exited count 2, 3 starts)", wstest.Describe(got), fk.Calls(flaky.ID, fake.Start))
			}
			// Always crashing: ERROR after the retries, the exit status kept.
			loop := mk("loop")
			fk.Crash(loop.ID, 100, "exit 3", 3)
			st.SetDesired(ctx, loop.ID, workspace.Running, time.Now())
			got = h.waitState(t, loop.ID, workspace.Error, 15*time.Second)
			if e := got.ErrorInfo; e == nil || e.Reason != workspace.ReasonRetryExceeded || e.ExitStatus != "exit 3" || got.ErrorCount != 3 || fk.Calls(loop.ID, fake.Start) != 3 {
				t.Fatalf("crash loop: %s, %d starts; want ERROR RetryExceeded with exit 3 after 3 starts", wstest.Describe(got), fk.Calls(loop.ID, fake.Start))
			}
		})
	}
}

// A command that keeps ending after it ran a while is a crash loop: each
// end within the crash window counts on (the workspace shows RUNNING with
// the count between ends), and the loop ends in ERROR after the retries;
// ends further apart than the window start the count again — on every
// store. The two halves each have a store and reconciler of their own and
// run side by side.
func TestCrashLoopAcrossRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: real-time crash windows (15 s a store); TestCrashedStartIsReported/mem covers a crash loop")
	}
	t.Parallel() // waits on real-time crash windows (main_test.go)
	for _, b := range recBackends {
		t.Run(b.Name+"/within-window", func(t *testing.T) {
			t.Parallel()
			cl := startCrashLoop(t, b.open(t), time.Minute)
			cl.waitRunning(0)
			for i := 1; i <= 2; i++ {
				cl.fk.End(cl.w.ID, "exit 3", 3)
				got := cl.waitRunning(i)
				if e := got.ErrorInfo; e == nil || e.Reason != workspace.ReasonExited || got.ErrorCount != i || e.ExitStatus != "exit 3" {
					t.Fatalf("after end %d: %s; want RUNNING with Exited, count %d", i, wstest.Describe(got), i)
				}
			}
			cl.fk.End(cl.w.ID, "exit 3", 3)
			got := cl.h.waitState(t, cl.w.ID, workspace.Error, 20*time.Second)
			if e := got.ErrorInfo; e == nil || e.Reason != workspace.ReasonRetryExceeded || e.ExitStatus != "exit 3" || got.ErrorCount != 3 {
				t.Fatalf("the third end in a row: %s; want ERROR RetryExceeded with exit 3", wstest.Describe(got))
			}
		})
		// Ends further apart than the window never add up.
		t.Run(b.Name+"/apart", func(t *testing.T) {
			t.Parallel()
			cl := startCrashLoop(t, b.open(t), 300*time.Millisecond)
			cl.waitRunning(0)
			for i := 0; i < 4; i++ {
				time.Sleep(400 * time.Millisecond) // real time: run longer than the 300 ms crash window
				before := time.Now()
				cl.fk.End(cl.w.ID, "exit 1", 1)
				var got workspace.Workspace
				wstest.WaitFor(t, 10*time.Second, "the end counted, as the first of a new count", func() (bool, string) {
					got, _ = cl.h.st.Get(t.Context(), cl.w.ID)
					return got.ErrorInfo != nil && got.ErrorInfo.ExitedAt.After(before.Add(-time.Millisecond)) && got.ObservedStatus == workspace.Running && got.Operation == workspace.OpNone, wstest.Describe(got)
				})
				if got.ErrorCount != 1 {
					t.Fatalf("end %d, apart from the previous by more than the window: %s; want count 1", i+1, wstest.Describe(got))
				}
			}
		})
	}
}

// crashLoop is a workspace wanting RUNNING under a reconciler whose
// retries (2, 100 ms apart) count the ends of its command within window.
type crashLoop struct {
	t  *testing.T
	fk *fake.Provider
	h  *harness
	w  workspace.Workspace
}

func startCrashLoop(t *testing.T, st testStore, window time.Duration) *crashLoop {
	fk := fake.New(0)
	h := startHarness(t, st, fk, hints.NewLocal(), Config{MaxRetries: 2, RetryBackoff: 100 * time.Millisecond, CrashWindow: window})
	w, err := st.Create(t.Context(), workspace.NewWorkspace{Name: "loop", Desired: workspace.Running}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &crashLoop{t: t, fk: fk, h: h, w: w}
}

// waitRunning waits for RUNNING, the start complete, count ends counted.
func (c *crashLoop) waitRunning(count int) workspace.Workspace {
	c.t.Helper()
	var got workspace.Workspace
	wstest.WaitFor(c.t, 20*time.Second, "RUNNING, start complete", func() (bool, string) {
		got, _ = c.h.st.Get(c.t.Context(), c.w.ID)
		return got.ObservedStatus == workspace.Running && got.Operation == workspace.OpNone && got.ErrorCount == count, wstest.Describe(got)
	})
	return got
}

// tickCounting counts what the tick reads: rows (ListActionable) and id
// lists (ListActionableIDs).
type tickCounting struct {
	testStore
	rows, idLists atomic.Int64
}

func (c *tickCounting) ListActionable(ctx context.Context) ([]workspace.Workspace, error) {
	ws, err := c.testStore.ListActionable(ctx)
	c.rows.Add(int64(len(ws)))
	return ws, err
}

func (c *tickCounting) ListActionableIDs(ctx context.Context) ([]string, error) {
	c.idLists.Add(1)
	return c.testStore.ListActionableIDs(ctx)
}

// TestTickReadsRowsOnlyForNewWorkspaces: a tick reads the rows of the
// actionable workspaces that have no process yet and only pokes the others,
// which read their row themselves; a change nobody hinted converges on the
// tick either way.
func TestTickReadsRowsOnlyForNewWorkspaces(t *testing.T) {
	for _, b := range recBackends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := &tickCounting{testStore: b.open(t)}
			var ids []string
			for i := range 5 {
				w, err := st.Create(ctx, workspace.NewWorkspace{Name: fmt.Sprint("w", i), Desired: workspace.Running}, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, w.ID)
			}
			// An hour's interval: the first tick, at start, and the ones
			// below are the only ones. The store's writes publish no hints.
			h := startHarness(t, st, fake.New(time.Millisecond), hints.NewLocal(), Config{Interval: time.Hour})
			for _, id := range ids {
				h.waitState(t, id, workspace.Running, 10*time.Second)
			}
			if got := st.rows.Load(); got != 5 {
				t.Fatalf("the first tick read %d rows, want the 5 new workspaces'", got)
			}

			// A change to a workspace with a process: the tick reads ids only.
			if _, err := st.SetDesired(ctx, ids[0], workspace.Standby, time.Now()); err != nil {
				t.Fatal(err)
			}
			lists := st.idLists.Load()
			if err := h.rec.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			h.waitState(t, ids[0], workspace.Standby, 10*time.Second)
			if got := st.rows.Load(); got != 5 {
				t.Fatalf("a tick over workspaces in hand read %d rows", got-5)
			}
			if st.idLists.Load() != lists+1 {
				t.Fatalf("a tick listed ids %d times, want once", st.idLists.Load()-lists)
			}

			// A new workspace: the tick reads its row.
			w, err := st.Create(ctx, workspace.NewWorkspace{Name: "late", Desired: workspace.Running}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := h.rec.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			h.waitState(t, w.ID, workspace.Running, 10*time.Second)
			if got := st.rows.Load() - 5; got < 1 {
				t.Fatal("a tick did not read the new workspace's row")
			}
		})
	}
}
