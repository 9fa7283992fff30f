package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/handoff"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store/memstore"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/urgency"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// TestConfigFromEnv: the seven RECONCILER_* variables of the seed, in
// seconds; MAX_RETRIES=0 is no retry at all; unset ones are the seed's
// defaults (10 s, 3, 30 s, 300/300/1800/1800 s); bad values are refused
// naming the variable.
func TestConfigFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	effective := func(t *testing.T, kv map[string]string) Config {
		t.Helper()
		c, err := ConfigFromEnv(env(kv))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.validate(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	type seed struct {
		Interval, Backoff                     time.Duration
		MaxRetries                            int
		Starting, Stopping, Archiving, Restor time.Duration
	}
	view := func(c Config) seed {
		return seed{c.Interval, c.RetryBackoff, c.MaxRetries, c.Timeouts[workspace.OpStarting], c.Timeouts[workspace.OpStopping], c.Timeouts[workspace.OpArchiving], c.Timeouts[workspace.OpRestoring]}
	}
	s := time.Second
	defaults := effective(t, nil)
	if diff := cmp.Diff(seed{10 * s, 30 * s, 3, 300 * s, 300 * s, 1800 * s, 1800 * s}, view(defaults)); diff != "" {
		t.Errorf("defaults (-seed +got):\n%s", diff)
	}
	if p, d := defaults.Timeouts[workspace.OpProvisioning], defaults.Timeouts[workspace.OpDeleting]; p != 1800*s || d != 1800*s {
		t.Errorf("PROVISIONING, DELETING timeouts %v, %v; want 1800 s as archive/restore", p, d)
	}
	all := effective(t, map[string]string{"RECONCILER_INTERVAL": "2.5", "RECONCILER_MAX_RETRIES": "5", "RECONCILER_RETRY_BACKOFF": "7",
		"RECONCILER_STARTING_TIMEOUT": "11", "RECONCILER_STOPPING_TIMEOUT": "12", "RECONCILER_ARCHIVING_TIMEOUT": "13", "RECONCILER_RESTORING_TIMEOUT": "14"})
	if diff := cmp.Diff(seed{2500 * time.Millisecond, 7 * s, 5, 11 * s, 12 * s, 13 * s, 14 * s}, view(all)); diff != "" {
		t.Errorf("all seven set (-want +got):\n%s", diff)
	}

	// MAX_RETRIES=0: the first failure is the last (RetryExceeded, no retry time).
	none, err := ConfigFromEnv(env(map[string]string{"RECONCILER_MAX_RETRIES": "0"}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReconciler(none, memstore.New(), fake.New(0), fake.New(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Config().MaxRetries; n >= 0 {
		t.Fatalf("RECONCILER_MAX_RETRIES=0: MaxRetries %d, want < 0 (none)", n)
	}
	// The effective config means the same when validated again.
	again, err := NewReconciler(r.Config(), memstore.New(), fake.New(0), fake.New(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := again.Config().MaxRetries; n >= 0 {
		t.Fatalf("RECONCILER_MAX_RETRIES=0 validated twice: MaxRetries %d, want < 0 (none)", n)
	}
	now := time.Now()
	w := workspace.Workspace{ID: "w", Operation: workspace.OpStarting, OpStartedAt: &now}
	failed := callResult(errors.New("no engine"))
	d := workspace.Decide(w, workspace.Observation{Call: &failed}, now, r.cfg.policy())
	if info := d.Info; d.Action != workspace.ActFail || info.Reason != workspace.ReasonRetryExceeded || !info.IsTerminal || info.ErrorCount != 1 || d.RetryAt != nil {
		t.Errorf("first failure with RECONCILER_MAX_RETRIES=0: %v %+v, next %v; want fail: RetryExceeded, terminal, count 1, no retry", d.Action, info, d.RetryAt)
	}

	for name, v := range map[string]string{"RECONCILER_INTERVAL": "abc", "RECONCILER_RETRY_BACKOFF": "0", "RECONCILER_STARTING_TIMEOUT": "-1",
		"RECONCILER_ARCHIVING_TIMEOUT": "Inf", "RECONCILER_MAX_RETRIES": "-1", "RECONCILER_RESTORING_TIMEOUT": "NaN"} {
		_, err := ConfigFromEnv(env(map[string]string{name: v}))
		if !errors.Is(err, workspace.ErrBadInput) || !strings.Contains(fmt.Sprint(err), name) {
			t.Errorf("%s=%q: error %v; want ErrBadInput naming the variable", name, v, err)
		}
	}
}

// TestConfigRefusesSettingsNoPolicyMeans: a timeout of 0 or less (which
// would time an operation out before its call), and a negative backoff cap
// or crash window, are refused rather than read as "the default", as the
// policy (workspace.Policy) would.
func TestConfigRefusesSettingsNoPolicyMeans(t *testing.T) {
	for name, c := range map[string]Config{
		"zero timeout":     {Timeouts: map[workspace.Operation]time.Duration{workspace.OpStarting: 0}},
		"negative timeout": {Timeouts: map[workspace.Operation]time.Duration{workspace.OpArchiving: -time.Second}},
		"negative cap":     {RetryBackoffMax: -time.Second},
		"negative window":  {CrashWindow: -time.Minute},
	} {
		if _, err := NewReconciler(c, memstore.New(), fake.New(0), fake.New(0), nil); !errors.Is(err, workspace.ErrBadInput) {
			t.Errorf("%s: error %v, want ErrBadInput", name, err)
		}
	}
}

// TestDefaultInterval: the reconciler ticks every 10 s unless told
// otherwise (the seed's RECONCILER_INTERVAL default), on its clock.
func TestDefaultInterval(t *testing.T) {
	clk := clock.NewFake(time.Now())
	st := &tickCounting{testStore: memstore.New()}
	r, err := NewReconciler(Config{Clock: clk}, st, fake.New(0), fake.New(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Config().Interval != 10*time.Second {
		t.Fatalf("default interval %v, want 10s", r.Config().Interval)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	ticks := func() int64 { return st.idLists.Load() }
	wstest.WaitFor(t, 5*time.Second, "the tick at start", func() (bool, string) { return ticks() == 1, fmt.Sprint(ticks()) })
	clk.BlockUntil(2) // the ticker and the wake-ups' timer
	clk.Advance(10 * time.Second)
	wstest.WaitFor(t, 5*time.Second, "the tick 10 s later", func() (bool, string) { return ticks() == 2, fmt.Sprint(ticks()) })
}

// TestStoredRetryTimeIsNeverEarly: the retry time a failure stores is never
// before the failure plus the policy's delay, though the store keeps
// milliseconds and the failure came mid-millisecond (stored rounded down,
// a tick in that last millisecond retried early:
// TestDockerDownStartRetriesPerPolicy's 399.75 ms against 400) — on every
// store.
func TestStoredRetryTimeIsNeverEarly(t *testing.T) {
	t.Parallel() // waits on one failure (main_test.go)
	for _, b := range recBackends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			st := b.open(t)
			ctx := t.Context()
			fk := fake.New(0)
			failedAt := time.Now().Truncate(time.Second).Add(700 * time.Microsecond)
			clk := clock.NewFake(failedAt) // it does not move: the failure is recorded at failedAt
			h := startHarness(t, st, fk, hints.NewLocal(), Config{Clock: clk, RetryBackoff: 10 * time.Second, MaxRetries: 3})
			w, err := st.Create(ctx, workspace.NewWorkspace{Name: "w", Desired: workspace.Standby}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			h.rec.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
			h.waitState(t, w.ID, workspace.Standby, 10*time.Second)
			fk.Fail(fake.Start, w.ID, 1)
			st.SetDesired(ctx, w.ID, workspace.Running, time.Now())
			h.rec.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
			var got workspace.Workspace
			wstest.WaitFor(t, 10*time.Second, "the failure recorded", func() (bool, string) {
				got, _ = st.Get(ctx, w.ID)
				return got.ErrorCount == 1 && got.NextRetryAt != nil, wstest.Describe(got)
			})
			if policy := failedAt.Add(10 * time.Second); got.NextRetryAt.Before(policy) {
				t.Fatalf("next_retry_at %v is before the failure + 10 s = %v", got.NextRetryAt.UTC(), policy.UTC())
			}
			if got.LastRetryAt == nil || !got.LastRetryAt.Equal(failedAt.Truncate(time.Millisecond)) {
				t.Fatalf("last_retry_at %v, want the failure's time %v", got.LastRetryAt, failedAt)
			}
		})
	}
}

// observedStoppedContainer starts nothing visible: Start succeeds (counted
// in starts), the monitor sees it Stopped, and it cannot say why (no
// ExitReporter).
func observedStoppedContainer(starts *atomic.Int64) provider.Container {
	return provider.ContainerFuncs{
		StartFunc:   func(context.Context, provider.Spec) error { starts.Add(1); return nil },
		StopFunc:    func(context.Context, string) error { return nil },
		ObserveFunc: func(context.Context, string) (provider.ContainerState, error) { return provider.Stopped, nil },
	}
}

// TestTimeoutErrorInfo: an executed start never observed running is not
// started again while it waits (the seed's defect 2 retried it every
// tick), and times out at RECONCILER_STARTING_TIMEOUT on the reconciler's
// clock with the seed's error_info, as the database holds it: reason
// Timeout, the operation, terminal, error_count, elapsed_seconds since the
// claim and occurred_at, the moment it was found; the operation stays and
// the workspace goes to ERROR.
func TestTimeoutErrorInfo(t *testing.T) {
	ctx := t.Context()
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	fk := fake.New(0)
	t0 := time.Now().Truncate(time.Millisecond)
	clk := clock.NewFake(t0)
	hb := hints.NewLocal()
	var starts atomic.Int64
	c := observedStoppedContainer(&starts)
	box := handoff.New()
	rec, err := NewReconciler(Config{Clock: clk, Timeouts: map[workspace.Operation]time.Duration{workspace.OpStarting: 300 * time.Second}, Handoff: box}, st, c, fk, hb)
	if err != nil {
		t.Fatal(err)
	}
	mon := singletons.NewHealthMonitor(singletons.MonitorConfig{Interval: time.Hour, Handoff: box}, st, c, fk, hb)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { rec.Run(runCtx); done <- struct{}{} }()
	go func() { mon.Run(runCtx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()

	w, err := st.Create(ctx, workspace.NewWorkspace{Name: "w", Desired: workspace.Running}, t0)
	if err != nil {
		t.Fatal(err)
	}
	hb.Publish(ctx, hints.ChanWorkspace, w.ID)
	deadline := t0.Add(300 * time.Second)
	wstest.WaitFor(t, 10*time.Second, "the start executed and its deadline's wake-up armed", func() (bool, string) {
		got, _ := st.Get(ctx, w.ID)
		rec.wake.mu.Lock()
		due := rec.wake.due[w.ID]
		rec.wake.mu.Unlock()
		return got.Operation == workspace.OpStarting && got.OpExecuted && !due.Before(deadline), wstest.Describe(got) + " due " + due.String()
	})
	clk.Advance(301500 * time.Millisecond)
	found := t0.Add(301500 * time.Millisecond)
	var got workspace.Workspace
	wstest.WaitFor(t, 10*time.Second, "ERROR after the timeout", func() (bool, string) {
		got, _ = st.Get(ctx, w.ID)
		return got.ObservedStatus == workspace.Error, wstest.Describe(got)
	})
	want := &workspace.ErrorInfo{Reason: workspace.ReasonTimeout, Operation: workspace.OpStarting, IsTerminal: true, Elapsed: 301.5, OccurredAt: found.UTC()}
	if diff := cmp.Diff(want, got.ErrorInfo); diff != "" || got.Operation != workspace.OpStarting {
		t.Fatalf("error_info after the timeout (-want +got):\n%s\noperation %s (want STARTING kept)", diff, got.Operation)
	}
	wantJSON := fmt.Sprintf(`{"reason":"Timeout","operation":"STARTING","is_terminal":true,"error_count":0,"elapsed_seconds":301.5,"occurred_at":%q}`,
		found.UTC().Format(time.RFC3339Nano))
	if j := got.ErrorInfo.JSON(); j != wantJSON {
		t.Errorf("error_info column %v, want %s", j, wantJSON)
	}
	if n := starts.Load(); n != 1 {
		t.Errorf("%d starts over the 301.5 s; want 1: an executed start waits for observation, it is not retried", n)
	}
}

// TestUserChangesReachTheSeedChannels: a hint made for a user's change (an
// urgent context) goes out on the urgent twin, served first, and on the
// seed's channel (workspace:{id}, monitor:trigger), so a listener there
// sees users' changes too; a plain hint goes out on the seed's channel
// only. Through the API, a user's change reaches hints.ChanWorkspace.
func TestUserChangesReachTheSeedChannels(t *testing.T) {
	ctx := t.Context()
	local := hints.NewLocal()
	subs := map[string]<-chan string{}
	for _, c := range []string{hints.ChanWorkspace, hints.ChanMonitor, hints.ChanWorkspaceUrgent, hints.ChanMonitorUrgent} {
		ch, cancel := local.Subscribe(c)
		defer cancel()
		subs[c] = ch
	}
	h := urgency.Hints{Bus: local}
	expect := func(channel, id string) {
		t.Helper()
		select {
		case got := <-subs[channel]:
			if got != id {
				t.Fatalf("%s carried %q, want %q", channel, got, id)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no hint for %s on %s", id, channel)
		}
	}
	h.Publish(urgency.Mark(ctx), hints.ChanWorkspace, "user-ws")
	h.Publish(urgency.Mark(ctx), hints.ChanMonitor, "user-mon")
	h.Publish(ctx, hints.ChanWorkspace, "bulk-ws")
	h.Publish(ctx, hints.ChanMonitor, "bulk-mon")
	expect(hints.ChanWorkspaceUrgent, "user-ws")
	expect(hints.ChanMonitorUrgent, "user-mon")
	expect(hints.ChanWorkspace, "user-ws")
	expect(hints.ChanWorkspace, "bulk-ws")
	expect(hints.ChanMonitor, "user-mon")
	expect(hints.ChanMonitor, "bulk-mon")
	// A subscriber gets its channel's hints in publish order: the next on
	// each urgent channel is this one, not a plain hint published before.
	h.Publish(urgency.Mark(ctx), hints.ChanWorkspace, "user-ws-2")
	h.Publish(urgency.Mark(ctx), hints.ChanMonitor, "user-mon-2")
	expect(hints.ChanWorkspaceUrgent, "user-ws-2")
	expect(hints.ChanMonitorUrgent, "user-mon-2")
	expect(hints.ChanWorkspace, "user-ws-2")
	expect(hints.ChanMonitor, "user-mon-2")

	// Through the API: `ws up` is a user's change.
	env := wstest.NewAPIEnv(t, wstest.OpenStore(t, "sqlite:"+t.TempDir()+"/ws.db"), api.APIConfig{Hints: local})
	c := env.Client(env.Admin)
	w, err := c.Create(ctx, workspace.NewWorkspace{Name: "box"})
	if err != nil {
		t.Fatal(err)
	}
	expect(hints.ChanWorkspace, w.ID)
	expect(hints.ChanWorkspaceUrgent, w.ID)
	if _, err := c.SetDesired(ctx, w.ID, workspace.Running); err != nil {
		t.Fatal(err)
	}
	expect(hints.ChanWorkspace, w.ID)
	expect(hints.ChanWorkspaceUrgent, w.ID)
}
