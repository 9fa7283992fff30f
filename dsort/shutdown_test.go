package dsort

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/record/recordtest"
)

// logLine is one JSON log record: its time, message and attributes.
type logLine struct {
	at    time.Time
	msg   string
	attrs map[string]any
}

func parseLog(t *testing.T, s string) []logLine {
	t.Helper()
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		at, err := time.Parse(time.RFC3339Nano, m["time"].(string))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, logLine{at: at, msg: m["msg"].(string), attrs: m})
	}
	return out
}

// find returns the first line with message msg (and, if step is set, that
// step attribute), or fails.
func find(t *testing.T, lines []logLine, msg, step string) logLine {
	t.Helper()
	for _, l := range lines {
		if l.msg == msg && (step == "" || l.attrs["step"] == step) {
			return l
		}
	}
	t.Fatalf("no log line %q (step %q) in:\n%v", msg, step, lines)
	return logLine{}
}

// TestShutdownStepsAreBounded makes each of seed 003's shutdown steps hang
// in turn (fault point shutdown-<step>) in a one-worker job: that step is
// cut off at its bound, the others run, and Run returns about one bound
// after "Shutting down...". The job's output is committed all the same.
//
// The six jobs run at once (t.Run from goroutines, which -parallel does
// not limit): they spend their time waiting out the bounds, so together
// they take about the longest bound (5 s), not the sum of the bounds over
// -parallel (10 s on 2 cores).
func TestShutdownStepsAreBounded(t *testing.T) {
	t.Parallel()
	var all sync.WaitGroup
	for _, step := range shutdownOrder {
		all.Go(func() { t.Run(step, func(t *testing.T) { testShutdownStepBounded(t, step) }) })
	}
	all.Wait()
}

// testShutdownStepBounded is TestShutdownStepsAreBounded with step hung.
func testShutdownStepBounded(t *testing.T, step string) {
	root := t.TempDir()
	release := make(chan struct{})
	var logBuf testutil.Buffer
	var sum dataSum
	in, out, tmp := filepath.Join(root, "in"), filepath.Join(root, "out"), filepath.Join(root, "tmp")
	writeRecords(t, filepath.Join(in, "a"), 2000, rand.New(rand.NewPCG(7, 8)), recordtest.Options{}, &sum)
	hook := func(_ context.Context, point string) {
		if point == "shutdown-"+step {
			<-release
		}
	}
	wcfg := WorkerConfig{Inputs: []string{in}, Output: out, TempDir: tmp, Memory: 32 << 20, FaultHook: hook,
		Logger: slog.New(slog.NewJSONHandler(&logBuf, nil))}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 1, HeartbeatInterval: 100 * time.Millisecond}, []WorkerConfig{wcfg})
	c.mustSucceed(t)
	close(release)
	if step == "shuffle" {
		// Phases cut off may still write there: the files step
		// left the temp dir (and its lock) to the process's end.
		if ents, _ := os.ReadDir(tmp); len(ents) != 1 {
			t.Errorf("with the phases cut off the temp dir holds %d entries, want the worker's dir kept", len(ents))
		}
	} else {
		// The released step finishes in the background: wait for
		// the temp dir (the files step) before t.TempDir's cleanup.
		testutil.WaitFor(t, 10*time.Second, "the released step's end", func() (bool, string) {
			ents, _ := os.ReadDir(tmp)
			return len(ents) == 0, fmt.Sprint(len(ents), " entries in the temp dir")
		})
	}
	checkOutput(t, []string{out}, sum)

	lines := parseLog(t, logBuf.String())
	begin := find(t, lines, "Shutting down...", "")
	cutLine := find(t, lines, "shutdown step cut off at its bound", step)
	done := find(t, lines, "Shutdown complete", "")
	bound := shutdownBounds[step]
	if el := done.at.Sub(begin.at); el < bound || el > bound+1500*time.Millisecond {
		t.Errorf("shutdown took %s with %s hung, want its bound %s (+1.5s)", el, step, bound)
	}
	if el := cutLine.at.Sub(begin.at); el < bound {
		t.Errorf("step %s cut off after %s, before its bound %s", step, el, bound)
	}
	if cut := done.attrs["cut_off"]; fmt.Sprint(cut) != fmt.Sprint([]any{step}) {
		t.Errorf("Shutdown complete: cut_off = %v, want [%s]", cut, step)
	}
	var msgs []string
	for _, l := range lines {
		msgs = append(msgs, l.msg)
	}
	for _, want := range []string{"Phase 1/4: Sampling...", "✓ Sampling complete", "Phase 2/4: Sorting...", "✓ Sorting complete",
		"Phase 3/4: Shuffling...", "✓ Shuffling complete", "Phase 4/4: Merging...", "✓ Merging complete", "✓ All phases complete!",
		"Received shutdown signal from Master", "Shutting down...", "Shutdown complete"} {
		if !slices.Contains(msgs, want) {
			t.Errorf("log lacks %q: %q", want, msgs)
		}
	}
}

// TestMasterShutdownStepsAreBounded makes each step of the master's stop()
// (seed 003: server 3 s, sends 3 s, connections 2 s) hang in turn in a
// one-worker job: that step is cut off at its bound, the others run, "Master
// node stopped" follows "Stopping Master node..." about one bound later and
// names it, and the job has succeeded all the same. The three jobs run at
// once, as in TestShutdownStepsAreBounded.
func TestMasterShutdownStepsAreBounded(t *testing.T) {
	t.Parallel()
	bounds := map[string]time.Duration{"server": 3 * time.Second, "sends": 3 * time.Second, "connections": 2 * time.Second}
	var all sync.WaitGroup
	for step, bound := range bounds {
		all.Go(func() {
			t.Run(step, func(t *testing.T) {
				release := make(chan struct{})
				var logBuf testutil.Buffer
				wcfg, sum := failingWorkerSum(t, t.TempDir(), "w0")
				mcfg := MasterConfig{Workers: 1, HeartbeatInterval: 100 * time.Millisecond,
					Logger: slog.New(slog.NewJSONHandler(&logBuf, nil)),
					FaultHook: func(_ context.Context, point string) {
						if point == "shutdown-"+step {
							<-release
						}
					}}
				c := startCluster(t, t.Context(), mcfg, []WorkerConfig{wcfg})
				c.mustSucceed(t)
				close(release)
				checkOutput(t, []string{wcfg.Output}, sum)
				lines := parseLog(t, logBuf.String())
				begin := find(t, lines, "Stopping Master node...", "")
				find(t, lines, "shutdown step cut off at its bound", step)
				done := find(t, lines, "Master node stopped", "")
				if el := done.at.Sub(begin.at); el < bound || el > bound+1500*time.Millisecond {
					t.Errorf("the master's stop took %s with %s hung, want its bound %s (+1.5s)", el, step, bound)
				}
				if cut := done.attrs["cut_off"]; fmt.Sprint(cut) != fmt.Sprint([]any{step}) {
					t.Errorf("Master node stopped: cut_off = %v, want [%s]", cut, step)
				}
			})
		})
	}
	all.Wait()
}
