package dsort

// End-to-end tests of how the processes end: seed 003's watchdog on the
// master and on an aborted job, and what `sort worker` prints at its exit
// (seed 000's history and phase durations).

import (
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/lifecycle"
)

// masterSteps hangs every step of the master's shutdown (3 + 3 + 2 s of
// bounds); workerSteps every step of a worker's (18 s).
const masterSteps = "GANTRY_DSORT_FAULT=shutdown-server,shutdown-sends,shutdown-connections"

func workerSteps() string {
	var points []string
	for _, s := range shutdownOrder {
		points = append(points, "shutdown-"+s)
	}
	return "GANTRY_DSORT_FAULT=" + strings.Join(points, ",")
}

// shortWatchdog sets the watchdog's deadline to 2 s instead of 15 s
// (GANTRY_DSORT_WATCHDOG, for tests): the shutdowns hung here take longer.
const shortWatchdog = "GANTRY_DSORT_WATCHDOG=2s"

// wantWatchdogExit checks that p was ended by its watchdog: with status
// code, about 2 s after from (when the job ended for it), saying so, and
// without finishing its hung shutdown (whose last line is finished).
func wantWatchdogExit(t *testing.T, p *proc, from time.Time, what string, code int, finished string) {
	t.Helper()
	if got := p.wait(time.Minute); got != code {
		t.Errorf("%s exited %d, want %d", p.name, got, code)
	}
	// Without the watchdog its hung steps would take 8 s (master) or 18 s
	// (worker) to be cut off. from is when this test read the line, a
	// little after the process armed its watchdog: 100 ms early is on time
	// (a CI run saw 1.999 s; the forcing-exit line below proves the watchdog).
	if el := p.end.Sub(from); el < 2*time.Second-100*time.Millisecond || el > 5*time.Second {
		t.Errorf("%s exited %s after the job ended, want its 2s watchdog (+3s slack)", p.name, el.Round(time.Millisecond))
	}
	p.waitLine(false, regexp.MustCompile(`^\[`+what+`\] Shutdown timeout - forcing exit: still shutting down 2s after the job ended \(exit `+
		strconv.Itoa(code)+`\)$`), time.Second)
	if strings.Contains(p.tail(100000), finished) {
		t.Errorf("%s's hung shutdown finished (%q)", p.name, finished)
	}
}

// TestMasterWatchdogEndsAHungShutdown: every step of the master's
// shutdown hangs; seed 003's watchdog ends it 2 s (the test's deadline)
// after the job succeeded, saying so, with status 0. The worker exits 0
// and the output is valid.
func TestMasterWatchdogEndsAHungShutdown(t *testing.T) {
	j := newJobEnv(t, 1, 4000, []string{shortWatchdog, masterSteps})
	w := j.startWorker(0)
	order := j.workerOrder()
	ended := j.master.waitLine(false, regexp.MustCompile(`every worker completed`), time.Minute).at
	wantWatchdogExit(t, j.master, ended, "Master", 0, "Master node stopped")
	j.master.waitLine(false, regexp.MustCompile(`fault point shutdown-server reached`), time.Second)
	if code := w.wait(30 * time.Second); code != 0 {
		t.Fatalf("worker exited %d", code)
	}
	j.validate(order)
}

// TestWatchdogExitsOneForAnAbortedJob: worker 1 is interrupted while it
// sorts, so the master aborts the job. Worker 0's shutdown and the
// master's hang: each watchdog ends its process 2 s after the job ended
// with status 1 (seed 003 exits 0; an aborted job must not look like a
// success). Worker 0 died in its shutdown before the files step, so its
// worker-state.json is still there: it says Failed with the master's
// reason (seed 000 §8.2), and worker 0's next start reads it, says its
// predecessor failed and cleans up (§8.1).
func TestWatchdogExitsOneForAnAbortedJob(t *testing.T) {
	j := newJobEnv(t, 2, 6000, []string{shortWatchdog, masterSteps})
	hung := j.startWorker(0, shortWatchdog, workerSteps())
	v := j.startWorker(1, "GANTRY_DSORT_FAULT=Sorting")
	v.waitLine(false, regexp.MustCompile(`fault point Sorting reached`), time.Minute)
	if err := v.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := v.wait(30 * time.Second); code == 0 {
		t.Errorf("the interrupted worker exited 0")
	}
	aborted := j.master.waitLine(false, regexp.MustCompile(`aborting the job`), time.Minute).at
	signal := hung.waitLine(false, regexp.MustCompile(`Received shutdown signal from Master`), time.Minute).at
	wantWatchdogExit(t, hung, signal, "Worker", 1, "Shutdown complete")
	wantWatchdogExit(t, j.master, aborted, "Master", 1, "Master node stopped")

	ws := j.workers[0]
	files, _ := filepath.Glob(filepath.Join(ws.tmp, "gantry-dsort-*", StateFileName))
	if len(files) != 1 {
		t.Fatalf("worker 0 left state files %v, want the one its watchdog left behind", files)
	}
	snap, err := lifecycle.LoadSnapshot(files[0])
	if err != nil {
		t.Fatal(err)
	}
	reason := regexp.MustCompile(`^dsort: job aborted: worker \d \(127\.0\.0\.3:\d+\) failed: context canceled$`)
	if n := len(snap.History); snap.State != "Failed" || n == 0 || !reason.MatchString(snap.History[n-1].Reason) {
		t.Errorf("worker 0's worker-state.json: state %q, history %+v; want Failed with the reason %q", snap.State, snap.History, reason)
	}

	again := j.startWorkerWith(0, nil, "--register-timeout", "1s")
	again.waitLine(false, regexp.MustCompile(`Worker previously failed\. Cleaning up and restarting\.\.\..*previous_state=Failed`), time.Minute)
	if code := again.wait(time.Minute); code == 0 {
		t.Error("worker 0 restarted without a master exited 0")
	}
	history, _ := printedHistory(t, again)
	if len(history) != 1 || !regexp.MustCompile(`^\[\+0\.0s\] Initializing -> Failed: dsort: lost contact with the master: cannot register`).MatchString(history[0]) {
		t.Errorf("the restarted worker printed the history %q, want one transition to Failed naming the registration", history)
	}
	if d := workDirs(t, ws.tmp); len(d) != 0 {
		t.Errorf("the restarted worker left its temp dir: %v", d)
	}
}

// historyLine is one line of seed 000's printHistory: "[+1.2s] A -> B: reason".
var historyLine = regexp.MustCompile(`^\[\+\d+\.\ds\] (\w+) -> (\w+): (.*)$`)

// printedHistory returns what `sort worker` printed at its exit under
// "=== State Transition History ===" (the history's lines) and "=== Phase
// Durations ===" (one line per phase).
func printedHistory(t *testing.T, p *proc) (history, phases []string) {
	t.Helper()
	lines := strings.Split(p.tail(100000), "\n")
	i := slices.Index(lines, "=== State Transition History ===")
	k := slices.Index(lines, "=== Phase Durations ===")
	if i < 0 || k < i {
		t.Fatalf("%s printed no state history and phase durations:\n%s", p.name, p.tail(40))
	}
	for _, l := range lines[i+1 : k] {
		if !historyLine.MatchString(l) {
			t.Errorf("%s: history line %q is not \"[+x.xs] From -> To: reason\"", p.name, l)
		}
		history = append(history, l)
	}
	phase := regexp.MustCompile(`^(Sampling|Sorting|Shuffling|Merging): (\d+\.\d\ds|in progress \(\d+\.\d\ds\))$`)
	for _, l := range lines[k+1:] {
		if !phase.MatchString(l) {
			break
		}
		phases = append(phases, l)
	}
	return history, phases
}

// wantPrintedFailure checks that worker process p printed its history at
// its exit, ending in Failed with a reason matching reason.
func wantPrintedFailure(t *testing.T, p *proc, reason string) {
	t.Helper()
	history, _ := printedHistory(t, p)
	if len(history) == 0 {
		t.Fatalf("%s printed an empty history", p.name)
	}
	m := historyLine.FindStringSubmatch(history[len(history)-1])
	if m == nil || m[2] != "Failed" || !regexp.MustCompile(reason).MatchString(m[3]) {
		t.Errorf("%s's printed history ends %q, want a transition to Failed with a reason matching %q", p.name, history[len(history)-1], reason)
	}
}

// wantPrintedSuccess checks the history and phase durations a worker that
// completed printed at its exit: the seed's eight transitions in order, each
// with its reason, and the four phases, each finished.
func wantPrintedSuccess(t *testing.T, p *proc) {
	t.Helper()
	history, phases := printedHistory(t, p)
	chain := []string{"Initializing", "Sampling", "WaitingForPartitionConfig", "Sorting", "WaitingForShuffleSignal",
		"Shuffling", "WaitingForMergeSignal", "Merging", "Completed"}
	var got []string
	for _, l := range history {
		if m := historyLine.FindStringSubmatch(l); m != nil && m[3] != "" {
			got = append(got, m[1]+" -> "+m[2])
		}
	}
	var want []string
	for i := 1; i < len(chain); i++ {
		want = append(want, chain[i-1]+" -> "+chain[i])
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s printed the transitions %q, want %q (each with a reason)", p.name, got, want)
	}
	if len(phases) != 4 || !strings.HasPrefix(phases[0], "Sampling: ") || !strings.HasPrefix(phases[3], "Merging: ") ||
		strings.Contains(strings.Join(phases, "\n"), "in progress") {
		t.Errorf("%s printed the phase durations %q, want Sampling, Sorting, Shuffling and Merging, each done", p.name, phases)
	}
}
