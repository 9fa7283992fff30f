package dsort

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/lifecycle"
	"github.com/gantryhq/gantry/record/recordtest"
	"github.com/google/go-cmp/cmp"
)

func TestConfigValidation(t *testing.T) {
	for _, c := range []WorkerConfig{
		{Inputs: []string{"in"}, Output: "out"},
		{Master: "127.0.0.1:1", Output: "out"},
		{Master: "127.0.0.1:1", Inputs: []string{"in"}},
		{Master: "nohostport", Inputs: []string{"in"}, Output: "out"},
		{Master: "127.0.0.1:1", Inputs: []string{"in"}, Output: "out", Memory: 1 << 20},
	} {
		if _, err := NewWorker(c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewWorker(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if _, err := NewMaster(MasterConfig{}); !errors.Is(err, ErrConfig) {
		t.Errorf("NewMaster with 0 workers: err = %v", err)
	}
}

// The phase times a worker reports (heartbeats, GetStatus) and its phase
// metric run on WorkerConfig.Clock, like its heartbeats.
func TestWorkerTimesPhasesOnItsClock(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_000_000, 0))
	w, err := NewWorker(WorkerConfig{Master: "127.0.0.1:1", Inputs: []string{"in"}, Output: "out", Memory: 64 << 20,
		TempDir: t.TempDir(), Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(w.WorkDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.startStateMachine(); err != nil {
		t.Fatal(err)
	}
	if err := w.track.start(Sampling, "test", 0); err != nil {
		t.Fatal(err)
	}
	fake.Advance(3 * time.Second)
	if err := w.track.start(WaitingForPartitionConfig, "test", 0); err != nil {
		t.Fatal(err)
	}
	fake.Advance(time.Hour) // not in a measured phase
	want := []PhaseTime{{State: Sampling, Duration: 3 * time.Second, Done: true}}
	if d := cmp.Diff(want, w.info().Phases); d != "" {
		t.Fatalf("phase times (-want +got):\n%s", d)
	}
	if h := w.sm.History(); len(h) != 2 || !h[1].At.Equal(fake.Now().Add(-time.Hour)) {
		t.Fatalf("transitions dated %v, want the fake clock's", h)
	}
}

// Seed 000 §5.1: whatever ends a worker's run with an error, it moves to
// Failed with the error as the reason, in its history and in the state it
// persists, before its shutdown cleans up. These tests take each way a
// worker fails in turn.

// probeState makes cfg's fault hook read the worker's persisted state at
// the shutdown's files step (the moment before the temp dir, and the state
// file in it, are removed) into the returned channel; every other point
// goes to next (nil: none).
func probeState(t *testing.T, cfg *WorkerConfig, next func(context.Context, string)) <-chan lifecycle.Snapshot {
	t.Helper()
	path := filepath.Join(newWorkDir(cfg.TempDir, cfg.Inputs, cfg.Output).path, StateFileName)
	got := make(chan lifecycle.Snapshot, 1)
	cfg.FaultHook = func(ctx context.Context, point string) {
		if point == "shutdown-files" {
			snap, err := lifecycle.LoadSnapshot(path)
			if err != nil {
				t.Errorf("the worker's state file at its shutdown's files step: %v", err)
			}
			got <- snap
			return
		}
		if next != nil {
			next(ctx, point)
		}
	}
	return got
}

// failingWorker is one worker's config in root/name: one input file of
// 2000 records, a small budget.
func failingWorker(t *testing.T, root, name string) WorkerConfig {
	t.Helper()
	cfg, _ := failingWorkerSum(t, root, name)
	return cfg
}

// failingWorkerSum is failingWorker and its input's fingerprint.
func failingWorkerSum(t *testing.T, root, name string) (WorkerConfig, dataSum) {
	t.Helper()
	dir := filepath.Join(root, name)
	var sum dataSum
	writeRecords(t, filepath.Join(dir, "in", "data"), 2000, rand.New(rand.NewPCG(11, uint64(len(name)))), recordtest.Options{}, &sum)
	return WorkerConfig{Inputs: []string{filepath.Join(dir, "in")}, Output: filepath.Join(dir, "out"),
		TempDir: filepath.Join(dir, "tmp"), Memory: 32 << 20}, sum
}

// wantFailed checks that worker w's Run returned an error and that both its
// history and the state it persisted end in Failed, from one of states
// (none: any), with a reason matching reason.
func wantFailed(t *testing.T, name string, w *Worker, runErr <-chan error, persisted <-chan lifecycle.Snapshot, reason string, states ...State) error {
	t.Helper()
	var err error
	select {
	case err = <-runErr:
	case <-time.After(time.Minute):
		t.Fatalf("%s: Run did not return", name)
	}
	if err == nil {
		t.Fatalf("%s: Run returned nil", name)
	}
	re := regexp.MustCompile(reason)
	h := w.StateMachine().History()
	if len(h) == 0 {
		t.Fatalf("%s (Run: %v): no transitions at all, want one to Failed", name, err)
	}
	last := h[len(h)-1]
	if last.To != Failed || !re.MatchString(last.Reason) || len(states) > 0 && !slices.Contains(states, last.From) {
		t.Errorf("%s (Run: %v): history ends %s -> %s: %q, want -> Failed from %v with a reason matching %q",
			name, err, last.From, last.To, last.Reason, states, reason)
	}
	select {
	case snap := <-persisted:
		n := len(snap.History)
		if snap.State != "Failed" || n == 0 || snap.History[n-1].To != "Failed" || snap.History[n-1].Reason != last.Reason {
			t.Errorf("%s: persisted state %q, last transition %+v; want Failed with reason %q", name, snap.State, snap.History, last.Reason)
		}
	case <-time.After(time.Minute):
		t.Errorf("%s: the shutdown never reached its files step", name)
	}
	return err
}

// A worker interrupted in the middle of the job (its context ends while it
// sorts) and the worker whose job the master aborts because of it both end
// in Failed: the first with "context canceled", the second with the
// master's reason. (Where each was by then depends on timing: the
// interrupted one may finish its sort's last step, and the other may have
// started the shuffle.)
func TestInterruptedAndAbortedWorkersEndInFailed(t *testing.T) {
	root := t.TempDir()
	c := startCluster(t, t.Context(), MasterConfig{Workers: 2, HeartbeatInterval: 100 * time.Millisecond}, nil)
	waiting := failingWorker(t, root, "w0")
	waitingState := probeState(t, &waiting, nil)
	sorting := make(chan struct{})
	interrupted := failingWorker(t, root, "w1")
	interruptedState := probeState(t, &interrupted, func(ctx context.Context, point string) {
		if point == "Sorting" {
			close(sorting)
			<-ctx.Done()
		}
	})
	w0, err0 := c.startWorker(t, t.Context(), waiting)
	ctx1, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	w1, err1 := c.startWorker(t, ctx1, interrupted)
	select {
	case <-sorting:
	case <-time.After(time.Minute):
		t.Fatal("the worker did not reach the Sorting fault point")
	}
	interrupt()
	if err := wantFailed(t, "the interrupted worker", w1, err1, interruptedState, `^context canceled$`); !errors.Is(err, context.Canceled) {
		t.Errorf("the interrupted worker's Run = %v, want context.Canceled", err)
	}
	if err := wantFailed(t, "the aborted worker", w0, err0, waitingState,
		`^dsort: job aborted: worker \d \(\S+\) failed: context canceled$`); !errors.Is(err, ErrAborted) {
		t.Errorf("the aborted worker's Run = %v, want ErrAborted", err)
	}
	select {
	case err := <-c.masterErr:
		if !errors.Is(err, ErrAborted) {
			t.Errorf("master: %v, want ErrAborted", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the master did not return")
	}
}

// A worker that fails before it has registered ends in Failed from
// Initializing: turned away by the master (a wrong token), or finding no
// master at all within its RegisterTimeout.
func TestWorkerTurnedAwayAtRegistrationEndsInFailed(t *testing.T) {
	root := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	c := startCluster(t, ctx, MasterConfig{Workers: 1, Token: "s3cret", ShutdownGrace: time.Millisecond}, nil)
	defer func() { cancel(); <-c.masterErr }()

	wrong := failingWorker(t, root, "wrong")
	wrong.Token = "wrong"
	wrongState := probeState(t, &wrong, nil)
	w, errc := c.startWorker(t, t.Context(), wrong)
	wantFailed(t, "a worker with a wrong token", w, errc, wrongState, `register with master .*token`, Initializing)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := ln.Addr().String()
	ln.Close()
	lonely := failingWorker(t, root, "lonely")
	lonely.Master, lonely.RegisterTimeout = nobody, 300*time.Millisecond
	lonelyState := probeState(t, &lonely, nil)
	w, errc = c.startWorker(t, t.Context(), lonely)
	if err := wantFailed(t, "a worker without a master", w, errc, lonelyState, `cannot register with `+regexp.QuoteMeta(nobody), Initializing); !errors.Is(err, ErrMasterLost) {
		t.Errorf("Run = %v, want ErrMasterLost", err)
	}
}

// A worker whose own phase fails (its input file vanishes between the
// sample and the sort) ends in Failed from Sorting with that error, and the
// master aborts the job naming it.
func TestWorkerOwnFailureEndsInFailed(t *testing.T) {
	root := t.TempDir()
	c := startCluster(t, t.Context(), MasterConfig{Workers: 1, HeartbeatInterval: 100 * time.Millisecond}, nil)
	cfg := failingWorker(t, root, "w0")
	state := probeState(t, &cfg, func(_ context.Context, point string) {
		if point == "Sampling" {
			if err := os.Remove(filepath.Join(cfg.Inputs[0], "data")); err != nil {
				t.Error(err)
			}
		}
	})
	w, errc := c.startWorker(t, t.Context(), cfg)
	wantFailed(t, "a worker whose input vanished", w, errc, state, `data.*no such file or directory`, Sorting)
	select {
	case err := <-c.masterErr:
		if !errors.Is(err, ErrAborted) || !regexp.MustCompile(`worker 0 \(\S+\) failed: .*no such file`).MatchString(err.Error()) {
			t.Errorf("master: %v, want the job aborted naming the worker's failure", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the master did not return")
	}
}

// A worker that loses its master (every connection to it cut, nothing
// listening any more) ends in Failed with "lost contact with the master"
// after MasterTimeout.
func TestWorkerThatLosesItsMasterEndsInFailed(t *testing.T) {
	root := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	c := startCluster(t, ctx, MasterConfig{Workers: 1, HeartbeatInterval: 100 * time.Millisecond, ShutdownGrace: time.Millisecond}, nil)
	defer func() { cancel(); <-c.masterErr }()
	proxy := newFreezingProxy(t, c.addr)
	cfg := failingWorker(t, root, "w0")
	cfg.Master, cfg.MasterTimeout = proxy.ln.Addr().String(), 500*time.Millisecond
	sampling := make(chan struct{})
	state := probeState(t, &cfg, func(ctx context.Context, point string) {
		if point == "Sampling" {
			close(sampling)
			<-ctx.Done()
		}
	})
	w, errc := c.startWorker(t, t.Context(), cfg)
	select {
	case <-sampling:
	case <-time.After(time.Minute):
		t.Fatal("the worker did not reach the Sampling fault point")
	}
	proxy.cut()
	if err := wantFailed(t, "a worker that lost its master", w, errc, state, `lost contact with the master: no reply from `+
		regexp.QuoteMeta(cfg.Master)+` for 500ms`, Sampling); !errors.Is(err, ErrMasterLost) {
		t.Errorf("Run = %v, want ErrMasterLost", err)
	}
}

// Seed 000 §8.1: a worker that finds the state file of a predecessor that
// failed (one that died before its shutdown removed it) says so, cleans up
// what was left and runs the job from the start.
func TestRestartAfterAFailedRunCleansUpAndStartsAgain(t *testing.T) {
	root := t.TempDir()
	cfg, sum := failingWorkerSum(t, root, "w0")
	dir := newWorkDir(cfg.TempDir, cfg.Inputs, cfg.Output).path
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "runs", "run-000000"), "a failed run's spill\n")
	prev, err := NewStateMachine(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	prev.Transition(Sampling, "registered; sampling")
	prev.Transition(Failed, "disk full")
	var log testutil.Buffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&log, nil))
	c := startCluster(t, t.Context(), MasterConfig{Workers: 1, HeartbeatInterval: 100 * time.Millisecond}, []WorkerConfig{cfg})
	c.mustSucceed(t)
	lines := parseLog(t, log.String())
	l := find(t, lines, "Worker previously failed. Cleaning up and restarting...", "")
	if l.attrs["previous_state"] != "Failed" || l.attrs["reason"] != "disk full" {
		t.Errorf("the restart logged %v, want previous_state=Failed reason=\"disk full\"", l.attrs)
	}
	if h := c.workers[0].StateMachine().History(); h[len(h)-1].To != Completed || h[0].From != Initializing {
		t.Errorf("the restarted worker's history %v, want Initializing … Completed", h)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temp dir is still there after success: %v", err)
	}
	checkOutput(t, []string{cfg.Output}, sum)
}
