package process_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/process"
	"github.com/gantryhq/gantry/workspace/provider/providertest"
)

// testDirs is a workspace's volume (made) and a RunDir (not yet) in a
// test's temp dir.
func testDirs(t *testing.T) (vol, run string) {
	dir := t.TempDir()
	vol = filepath.Join(dir, "vol")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	return vol, filepath.Join(dir, "run")
}

func TestConformance(t *testing.T) {
	vol, run := testDirs(t)
	c := &process.Container{RunDir: run, StopGrace: time.Second}
	providertest.Container(t, c, provider.Spec{ID: "ws1", VolumeDir: vol, Command: "exec sleep 60"})
	ctx := t.Context()
	if err := c.Start(ctx, provider.Spec{ID: "ws2", VolumeDir: vol, Command: "echo $HOME > home.tmp && mv home.tmp home.txt; exec sleep 60"}); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx, "ws2")
	var b []byte
	testutil.WaitFor(t, 5*time.Second, "home.txt written by ws2", func() (bool, string) {
		b, _ = os.ReadFile(filepath.Join(vol, "home.txt"))
		return len(b) > 0, "no home.txt yet"
	})
	if strings.TrimSpace(string(b)) != vol {
		t.Fatalf("HOME = %q, want %q", b, vol)
	}
}

// A second Container over the same RunDir (a restarted server) finds the
// running process, and a pidfile whose pid was recycled is not Running.
func TestFoundAgainAfterRestart(t *testing.T) {
	ctx := t.Context()
	vol, run := testDirs(t)
	a := &process.Container{RunDir: run}
	if err := a.Start(ctx, provider.Spec{ID: "ws1", VolumeDir: vol}); err != nil {
		t.Fatal(err)
	}
	b := &process.Container{RunDir: run, StopGrace: time.Second}
	if st, _ := b.Observe(ctx, "ws1"); st != provider.Running {
		t.Fatalf("after restart: %v, want running", st)
	}
	if err := b.Start(ctx, provider.Spec{ID: "ws1", VolumeDir: vol}); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx, "ws1"); err != nil {
		t.Fatal(err)
	}
	// A pidfile naming a live process with another start time is not ours.
	os.WriteFile(filepath.Join(run, "ws2.pid"), []byte("1 12345\n"), 0o644)
	if st, _ := b.Observe(ctx, "ws2"); st != provider.Stopped {
		t.Fatalf("foreign pid: %v, want stopped", st)
	}
}

// A start rotates a log past its cap, so the files stay bounded across
// restarts.
func TestLogRotatesAtStart(t *testing.T) {
	vol, run := testDirs(t)
	c := &process.Container{RunDir: run, StopGrace: time.Second, LogCap: 1000}
	os.MkdirAll(c.RunDir, 0o755)
	log := filepath.Join(c.RunDir, "w1.log")
	os.WriteFile(log, bytes.Repeat([]byte("x\n"), 1000), 0o644)
	if err := c.Start(t.Context(), provider.Spec{ID: "w1", VolumeDir: vol, Command: "echo fresh; exec sleep 30"}); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.WithoutCancel(t.Context()), "w1")
	if fi, err := os.Stat(log + ".1"); err != nil || fi.Size() != 2000 {
		t.Fatalf("rotated log: %v %v", fi, err)
	}
	var buf bytes.Buffer
	testutil.WaitFor(t, 5*time.Second, "the command's fresh line in its logs", func() (bool, string) {
		buf.Reset()
		if err := c.Logs(t.Context(), "w1", 10, false, &buf); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(buf.String(), "fresh"), fmt.Sprintf("%q", buf.String())
	})
	if buf.String() != "fresh\n" {
		t.Fatalf("logs after the rotation: %q", buf.String())
	}
}

// A running command's log stays under its cap (plus one check interval's
// writes) however long it writes, and a follower keeps up across the
// truncations, seeing the newest lines.
func TestLogStaysUnderItsCapWhileRunning(t *testing.T) {
	const limit = 64 << 10
	vol, run := testDirs(t)
	c := &process.Container{RunDir: run, StopGrace: time.Second, LogCap: limit, LogCheck: 20 * time.Millisecond}
	// About 100 lines of 60 bytes every 10 ms: 600 KB/s, ten caps a second.
	cmd := `i=0; while :; do j=0; while [ $j -lt 100 ]; do i=$((i+1)); j=$((j+1)); echo "line $i ................................................"; done; sleep 0.01; done`
	if err := c.Start(t.Context(), provider.Spec{ID: "w1", VolumeDir: vol, Command: cmd}); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.WithoutCancel(t.Context()), "w1")
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	go func() { c.Logs(ctx, "w1", 1, true, pw); pw.Close() }()
	lines := bufio.NewScanner(pr)
	log := filepath.Join(c.RunDir, "w1.log")
	var biggest int64
	var last int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		if fi, err := os.Stat(log); err == nil {
			biggest = max(biggest, fi.Size())
		}
		if !lines.Scan() {
			t.Fatal("the follower ended")
		}
		var n int
		if _, err := fmt.Sscanf(lines.Text(), "line %d", &n); err == nil && n > last {
			last = n
		}
	}
	cancel()
	pr.Close()
	rotated, err := os.Stat(log + ".1")
	if err != nil {
		t.Fatalf("no rotated log: %v", err)
	}
	// One check interval at 600 KB/s is 12 KB; allow for a loaded machine.
	if biggest > limit+256<<10 || rotated.Size() > limit+256<<10 {
		t.Fatalf("log reached %d bytes, rotated %d; cap %d", biggest, rotated.Size(), limit)
	}
	out, _ := exec.Command("sh", "-c", "tail -n1 "+log).Output()
	var now int
	fmt.Sscanf(string(out), "line %d", &now)
	if last < 1000 || now-last > 20000 {
		t.Fatalf("the follower saw up to line %d; the command is at %d", last, now)
	}
	t.Logf("largest log %d bytes (cap %d), rotated %d; follower at line %d of %d", biggest, limit, rotated.Size(), last, now)
}

// Discard, after Stop, leaves nothing of the workspace under RunDir: its
// log (and the rotated part), pid and exit files, and a follower of its log
// ends; twice is a no-op, and another workspace's files stay.
func TestDiscardLeavesNothing(t *testing.T) {
	ctx := t.Context()
	vol, run := testDirs(t)
	c := &process.Container{RunDir: run, StopGrace: time.Second}
	for _, id := range []string{"ws1", "ws2"} {
		if err := c.Start(ctx, provider.Spec{ID: id, VolumeDir: vol, Command: "echo said by " + id + "; exec sleep 60"}); err != nil {
			t.Fatal(err)
		}
		defer c.Stop(ctx, id)
	}
	if err := os.WriteFile(filepath.Join(run, "ws1.log.1"), []byte("older output\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	followed := make(chan error, 1)
	go func() { followed <- c.Logs(ctx, "ws1", 0, true, io.Discard) }()
	if err := c.Stop(ctx, "ws1"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.Discard(ctx, "ws1"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-followed:
		if err != nil {
			t.Errorf("the followed log ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a followed log still open 5 s after its workspace was discarded")
	}
	left, _ := filepath.Glob(filepath.Join(run, "ws1.*"))
	if len(left) != 0 {
		t.Errorf("after Discard: %v left", left)
	}
	if _, err := os.Stat(filepath.Join(run, "ws2.log")); err != nil {
		t.Errorf("the other workspace's log: %v", err)
	}
	if err := c.Discard(ctx, "../ws2"); err == nil {
		t.Error("Discard of a path, not an id: no error")
	}
}

// An exec of a command the workspace's $PATH does not hold exits 127, as
// a shell says it, and names the command on stderr.
func TestExecOfAMissingCommand(t *testing.T) {
	ctx := t.Context()
	vol, run := testDirs(t)
	c := &process.Container{RunDir: run, StopGrace: time.Second, SharedUser: true}
	if err := c.Start(ctx, provider.Spec{ID: "ws1", VolumeDir: vol, Command: "exec sleep 60"}); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx, "ws1")
	var out, errb bytes.Buffer
	code, err := c.Exec(ctx, provider.ExecSpec{ID: "ws1", VolumeDir: vol, Argv: []string{"no-such-command-here"}}, nil, &out, &errb)
	if err != nil || code != process.ExitNotFound || !strings.Contains(errb.String(), "no-such-command-here") {
		t.Fatalf("exec of a missing command: code %d, err %v, stderr %q; want 127 naming it", code, err, errb.String())
	}
}
