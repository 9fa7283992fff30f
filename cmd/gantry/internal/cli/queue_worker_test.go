package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/internal/sysmem"
	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq"
)

// Redis killed under a running `queue worker --redis-lost-after 2s`, with
// the cron scheduler on (the default): the command exits 1 naming the
// address within the flag's time + 2 s. The scheduler used to run on the
// command's context alone and kept retrying Redis after the worker gave up,
// so the command never returned.
func TestQueueWorkerExitsWhenRedisDies(t *testing.T) {
	red := testutil.StartRedis(t)
	var logs, errb testutil.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, Env{Args: []string{"queue", "worker", "--redis", red.Addr(), "--redis-lost-after", "2s"},
			Stdout: io.Discard, Stderr: &errb, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	}()
	testutil.WaitFor(t, 20*time.Second, "the worker to start", func() (bool, string) {
		return strings.Contains(logs.String(), "taskq worker started"), logs.String()
	})
	red.Kill()
	killed := time.Now()
	select {
	case code := <-done:
		el := time.Since(killed)
		t.Logf("exit %d %s after Redis was killed: %s", code, el.Round(time.Millisecond), strings.TrimSpace(errb.String()))
		if code != 1 || !strings.Contains(errb.String(), red.Addr()) || !strings.Contains(errb.String(), "unreachable for") {
			t.Errorf("exit %d, stderr %q; want exit 1 naming %s", code, errb.String(), red.Addr())
		}
		if el > 4*time.Second {
			t.Errorf("exited %s after Redis died, want within 4s (--redis-lost-after 2s + 2s)", el.Round(time.Millisecond))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker still runs 30s after Redis died (--redis-lost-after 2s)\n%s", logs.String())
	}
}

// A Redis restarted on its saved dataset answers LOADING until it has read
// it back: the queue commands wait for it instead of failing with "redis
// unreachable: LOADING" (what the README's blocks ran into).
func TestQueueCommandsWaitOutLoadingRedis(t *testing.T) {
	red := testutil.StartRedis(t)
	red.RestartLoading(10000)
	for _, args := range [][]string{
		{"queue", "enqueue", "--redis", red.Addr(), "--queue", "demo", "--type", "noop", "--count", "3"},
		{"queue", "stats", "--redis", red.Addr()},
	} {
		var out bytes.Buffer
		if code := Execute(t.Context(), Env{Args: args, Stdout: &out, Stderr: &out}); code != 0 {
			t.Fatalf("gantry %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
		}
		t.Logf("gantry %s:\n%s", strings.Join(args[:2], " "), out.String())
	}
}

// --redis-lost-after: 1 min by default (taskq.DefaultRedisLostAfter, seed
// §5.2: a worker shuts down on a permanent loss), 0 waits forever (a
// negative RedisLostAfter), a negative flag is refused.
func TestQueueWorkerRedisLostAfterFlag(t *testing.T) {
	if d := newQueueWorkerCmd(&Env{}).Flags().Lookup("redis-lost-after").DefValue; d != "1m0s" {
		t.Errorf("--redis-lost-after defaults to %s, want 1m0s", d)
	}
	for _, tt := range []struct {
		flag    time.Duration
		want    time.Duration
		wantErr string
	}{
		{taskq.DefaultRedisLostAfter, time.Minute, ""},
		{3 * time.Second, 3 * time.Second, ""},
		{0, -1, ""},
		{-time.Second, 0, "want a duration >= 0"},
	} {
		o := parseWorkerFlags(t, "--queues", "a", "--redis-lost-after", tt.flag.String())
		cfg, err := o.config(&Env{})
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--redis-lost-after") {
				t.Errorf("--redis-lost-after %s: error %v, want one naming the flag and %q", tt.flag, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("--redis-lost-after %s: %v", tt.flag, err)
		case (tt.want < 0) != (cfg.RedisLostAfter < 0) || (tt.want >= 0 && cfg.RedisLostAfter != tt.want):
			t.Errorf("--redis-lost-after %s: RedisLostAfter %s, want %s (negative: never)", tt.flag, cfg.RedisLostAfter, tt.want)
		}
	}
}

// parseWorkerFlags is `queue worker`'s options from args, defaults filled.
func parseWorkerFlags(t *testing.T, args ...string) *queueWorkerOptions {
	t.Helper()
	var o queueWorkerOptions
	f := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	o.flags(f)
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &o
}

// The worker's bounds are refused, naming the flag, where the library would
// quietly put its default in their place; --shutdown-timeout 0 is no wait
// (a negative ShutdownTimeout: cancel at once).
func TestQueueWorkerFlagBounds(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--concurrency", "0"}, "--concurrency 0: want at least 1"},
		{[]string{"--concurrency", "-3"}, "--concurrency -3"},
		{[]string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout -1s"},
		{[]string{"--lease", "0s"}, "--lease 0s"},
		{[]string{"--lease", "-1s"}, "--lease -1s"},
		{[]string{"--dead-max", "-1"}, "--dead-max -1"},
		{[]string{"--dead-retention", "0s"}, "--dead-retention 0s"},
		{[]string{"--shutdown-timeout", "0s"}, ""},
		{nil, ""},
	} {
		cfg, err := parseWorkerFlags(t, tt.args...).config(&Env{})
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: error %v, want one saying %q", tt.args, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", tt.args, err)
		case len(tt.args) > 0 && cfg.ShutdownTimeout >= 0:
			t.Errorf("%v: ShutdownTimeout %s, want negative (cancel at once)", tt.args, cfg.ShutdownTimeout)
		case len(tt.args) == 0 && (cfg.ShutdownTimeout != 8*time.Second || cfg.Concurrency != 10 || cfg.LeaseDuration != 30*time.Second):
			t.Errorf("defaults: shutdown %s concurrency %d lease %s", cfg.ShutdownTimeout, cfg.Concurrency, cfg.LeaseDuration)
		}
	}
}

// `queue worker` runs under a Go memory limit, so that its record carries
// one and the health check's worker-memory check has something to measure:
// --memory-limit's, or by default 90% of the memory available; the limit
// before is put back when the command returns. (GOMEMLIMIT, applied by the
// runtime at start, is left alone: TestQueueWorkerKeepsGOMEMLIMIT.)
func TestQueueWorkerSetsMemoryLimit(t *testing.T) {
	addr := testutil.Redis(t)
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	avail, _ := sysmem.Available()
	if avail <= 0 {
		t.Fatal("this machine's memory cannot be read")
	}
	for _, tt := range []struct {
		flags []string
		want  int64
	}{
		{nil, avail / 10 * 9},
		{[]string{"--memory-limit", "3GiB"}, 3 << 30},
	} {
		if got := workerRecordLimit(t, addr, tt.flags...); got != tt.want {
			t.Errorf("queue worker %v: the record's memory limit %d, want %d", tt.flags, got, tt.want)
		}
		if l := debug.SetMemoryLimit(-1); l != before {
			t.Errorf("after the command the process's memory limit is %d, want it put back to %d", l, before)
		}
	}
}

// workerRecordLimit runs `queue worker` in this process on a queue of its
// own until its record is in Redis, and returns the memory limit it holds.
func workerRecordLimit(t *testing.T, addr string, flags ...string) int64 {
	t.Helper()
	q := fmt.Sprintf("climem-%d-%d", os.Getpid(), time.Now().UnixNano())
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer c.Purge(context.WithoutCancel(t.Context()), q)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	var errb testutil.Buffer
	go func() {
		args := append([]string{"queue", "worker", "--redis", addr, "--queues", q, "--no-steal", "--no-cron"}, flags...)
		done <- Execute(ctx, Env{Args: args, Stdout: io.Discard, Stderr: &errb})
	}()
	limit := recordedMemLimit(t, c, q, &errb)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("worker exit %d: %s", code, errb.String())
	}
	return limit
}

// A GOMEMLIMIT the user set (the runtime applies it at the process's start)
// is the limit `queue worker` runs under and records.
func TestQueueWorkerKeepsGOMEMLIMIT(t *testing.T) {
	bin := gantryBinary(t)
	addr := testutil.Redis(t)
	q := fmt.Sprintf("cligomem-%d", os.Getpid())
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer c.Purge(context.WithoutCancel(t.Context()), q)
	cmd := exec.Command(bin, "queue", "worker", "--redis", addr, "--queues", q, "--no-steal", "--no-cron")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=123MiB")
	var errb testutil.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		if err := <-exited; err != nil {
			t.Errorf("worker: %v\n%s", err, errb.String())
		}
	}()
	if limit := recordedMemLimit(t, c, q, &errb); limit != 123<<20 {
		t.Fatalf("the record's memory limit %d, want GOMEMLIMIT's %d", limit, 123<<20)
	}
}

// recordedMemLimit waits for the record of the running worker serving q and
// returns the memory limit it carries (errb: the worker's stderr, shown if
// the wait fails).
func recordedMemLimit(t *testing.T, c *taskq.Client, q string, errb *testutil.Buffer) int64 {
	t.Helper()
	var limit int64
	testutil.WaitFor(t, 20*time.Second, "the worker's record", func() (bool, string) {
		st, err := c.Stats(t.Context())
		if err != nil {
			return false, err.Error()
		}
		for _, w := range st.Workers {
			if slices.Contains(w.Queues, q) && w.State == "running" {
				limit = w.MemLimit
				return true, ""
			}
		}
		return false, errb.String()
	})
	return limit
}
