package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/dsort"
	"github.com/gantryhq/gantry/internal/testutil"
)

// runDsortCmd runs a gantry command line in-process and returns its exit status,
// stdout and stderr.
func runDsortCmd(ctx context.Context, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Execute(ctx, Env{Args: args, Stdout: &stdout, Stderr: &stderr})
	return code, stdout.String(), stderr.String()
}

// `sort master` and `sort worker` refuse bad arguments before they listen
// or touch a directory, naming what is wrong.
func TestSortMasterAndWorkerRefuseBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sort", "master", "0"}, "N must be a positive number of workers"},
		{[]string{"sort", "master", "x"}, "N must be a positive number of workers"},
		{[]string{"sort", "master", "2", "--port", "70000"}, "--port 70000 is not a TCP port"},
		{[]string{"sort", "master", "2", "--bind", "localhost"}, `--bind "localhost" is not an IP address`},
		{[]string{"sort", "worker", "127.0.0.1:1", "-O", t.TempDir()}, "at least one input directory (-I) is required"},
		{[]string{"sort", "worker", "nohostport", "-I", t.TempDir(), "-O", t.TempDir()}, "want IP:PORT"},
	} {
		code, _, stderr := runDsortCmd(t.Context(), tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("gantry %s: exit %d, stderr %q; want a failure saying %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// `sort status` prints the job's phase and registration count from a
// running master.
func TestSortStatusShowsTheJob(t *testing.T) {
	addrCh := make(chan string, 1)
	m, err := dsort.NewMaster(dsort.MasterConfig{Workers: 2, JobID: "feedc0de", ShutdownGrace: time.Millisecond,
		OnListen: func(a string) { addrCh <- a }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var addr string
	select {
	case addr = <-addrCh:
	case err := <-done:
		t.Fatalf("master: %v", err)
	}
	code, stdout, stderr := runDsortCmd(t.Context(), "sort", "status", addr)
	if code != 0 || !strings.HasPrefix(stdout, "job feedc0de: registering, 0/2 workers registered, ") ||
		!strings.Contains(stdout, "WORKER") {
		t.Fatalf("sort status: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// `sort status` against an address where no master answers (the job
// ended, or none was started) says so in plain words, naming the address,
// instead of gRPC's dial error.
func TestSortStatusWithoutAMaster(t *testing.T) {
	addr := testutil.FreeAddr(t)
	code, stdout, stderr := runDsortCmd(t.Context(), "sort", "status", addr)
	want := "gantry: sort status: dsort: no master answers at " + addr + ": the job may have ended (or the master is not running)\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("sort status %s: exit %d, stdout %q, stderr %q; want 1 and %q", addr, code, stdout, stderr, want)
	}
}

// A worker that fails before it registers (no master within
// --register-timeout) still ends in Failed, and `sort worker` prints seed
// 000's state history ("[+x.xs] From -> To: reason") and phase durations
// (none yet) before the error.
func TestSortWorkerPrintsItsHistoryWhenItFails(t *testing.T) {
	root := t.TempDir()
	in, out, tmp := filepath.Join(root, "in"), filepath.Join(root, "out"), filepath.Join(root, "tmp")
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	code, _, stderr := runDsortCmd(t.Context(), "sort", "worker", addr, "-I", in, "-O", out, "--tmp", tmp,
		"--memory", "32MiB", "--register-timeout", "200ms")
	want := regexp.MustCompile(`(?m)^=== State Transition History ===\n` +
		`\[\+0\.0s\] Initializing -> Failed: dsort: lost contact with the master: cannot register with ` + regexp.QuoteMeta(addr) + ` for 200ms: dial tcp ` + regexp.QuoteMeta(addr) + `: connect: connection refused; .*\n` +
		`=== Phase Durations ===\n` +
		`gantry: sort worker: dsort: lost contact with the master: cannot register with ` + regexp.QuoteMeta(addr) + ` .*\n\z`)
	if code != 1 || !want.MatchString(stderr) {
		t.Errorf("exit %d, stderr:\n%s\nwant 1 and a match for %q", code, stderr, want)
	}
}
