package dsort

// End-to-end tests: the gantry binary, built once in TestMain, runs as a
// master and workers in separate processes, as a user would run it.

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"

	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/record/recordtest"
)

// gantryBin is the binary under test (testutil.GantryBinary), set by
// needBinary, once: the process-level tests run in parallel and read it.
var (
	gantryBin     string
	gantryBinOnce sync.Once
)

// needBinary skips a process-level test under -short and otherwise builds
// the gantry binary (once per test process).
func needBinary(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("process-level test: skipped by -short")
	}
	bin := testutil.GantryBinary(t)
	gantryBinOnce.Do(func() { gantryBin = bin })
}

// line is one line of a process's output with when it was read.
type line struct {
	text string
	at   time.Time
}

// proc is a gantry process whose stdout and stderr are collected by line.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	code int           // exit code, valid after done
	end  time.Time     // exit time, valid after done

	mu     sync.Mutex // protects the fields below
	stdout []line
	stderr []line
	notify chan struct{} // closed and replaced on each new line
}

func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	needBinary(t)
	p := &proc{t: t, name: name, done: make(chan struct{}), notify: make(chan struct{})}
	p.cmd = exec.Command(gantryBin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	outR, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var readers sync.WaitGroup
	readers.Go(func() { p.collect(outR, &p.stdout) })
	readers.Go(func() { p.collect(errR, &p.stderr) })
	go func() {
		readers.Wait()
		err := p.cmd.Wait()
		p.end = time.Now()
		p.code = p.cmd.ProcessState.ExitCode()
		if err != nil && p.code == 0 {
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("--- %s stderr (last lines):\n%s", p.name, p.tail(40))
		}
	})
	return p
}

func (p *proc) collect(r io.Reader, dst *[]line) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		*dst = append(*dst, line{sc.Text(), time.Now()})
		close(p.notify)
		p.notify = make(chan struct{})
		p.mu.Unlock()
	}
}

func (p *proc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.stderr[max(0, len(p.stderr)-n):] {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

func (p *proc) stdoutLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.stdout {
		out = append(out, l.text)
	}
	return out
}

// waitLine waits until a line of stdout (or stderr) matches re and returns
// it. It fails the test if the process exits or timeout passes first.
func (p *proc) waitLine(stdout bool, re *regexp.Regexp, timeout time.Duration) line {
	p.t.Helper()
	deadline := time.After(timeout)
	seen, exited := 0, false
	for {
		p.mu.Lock()
		src := p.stderr
		if stdout {
			src = p.stdout
		}
		for ; seen < len(src); seen++ {
			if re.MatchString(src[seen].text) {
				l := src[seen]
				p.mu.Unlock()
				return l
			}
		}
		notify := p.notify
		p.mu.Unlock()
		if exited { // everything it printed has been scanned
			p.t.Fatalf("%s exited (code %d) without printing a line matching %q", p.name, p.code, re)
		}
		select {
		case <-notify:
		case <-p.done:
			exited = true // scan once more: the readers are done
		case <-deadline:
			p.t.Fatalf("%s printed no line matching %q within %s", p.name, re, timeout)
		}
	}
}

// checksum waits for a valsort process to exit and returns its exit code
// and the checksum it reported, on either stream (valsort 1.5's own command
// line reports on stderr, gantry's extended forms on stdout).
func (p *proc) checksum() (int, string) {
	p.t.Helper()
	code := p.wait(30 * time.Second)
	re := regexp.MustCompile(`^Checksum: (\S+)$`)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range append(slices.Clone(p.stdout), p.stderr...) {
		if m := re.FindStringSubmatch(l.text); m != nil {
			return code, m[1]
		}
	}
	return code, ""
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %s", p.name, timeout)
		return 0
	}
}

// job is a master and its workers' directories.
type job struct {
	t       *testing.T
	root    string
	master  *proc
	addr    string
	workers []*workerSpec
	sum     dataSum
}

type workerSpec struct {
	extra  []string // more flags (TLS)
	bind   string
	inputs []string
	out    string
	tmp    string
	proc   *proc
}

// newJob generates input for n workers, each with two input dirs holding a
// binary and an ASCII file made by `gantry gensort` (distinct record ranges),
// a one-record file and an empty file, and starts the master.
func newJob(t *testing.T, n, recordsPerWorker int, masterArgs ...string) *job {
	t.Helper()
	return newJobEnv(t, n, recordsPerWorker, nil, masterArgs...)
}

// newJobEnv is newJob with the master's extra environment.
func newJobEnv(t *testing.T, n, recordsPerWorker int, masterEnv []string, masterArgs ...string) *job {
	t.Helper()
	j := &job{t: t, root: t.TempDir()}
	rng := rand.New(rand.NewPCG(uint64(n), uint64(recordsPerWorker)))
	for w := range n {
		dir := filepath.Join(j.root, fmt.Sprint("w", w))
		in1, in2 := filepath.Join(dir, "in1"), filepath.Join(dir, "in2")
		half := recordsPerWorker / 2
		first := w * recordsPerWorker
		j.gensort(filepath.Join(in1, "binary"), first, half)
		j.gensort(filepath.Join(in2, "ascii"), first+half, recordsPerWorker-half-1, "-a")
		writeRecords(t, filepath.Join(in2, "tiny"), 1, rng, recordtest.Options{}, &j.sum)
		writeRecords(t, filepath.Join(in1, "empty"), 0, rng, recordtest.Options{}, &j.sum)
		j.workers = append(j.workers, &workerSpec{bind: fmt.Sprintf("127.0.0.%d", w+2),
			inputs: []string{in1, in2}, out: filepath.Join(dir, "out"), tmp: filepath.Join(dir, "tmp")})
	}
	args := append([]string{"sort", "master", fmt.Sprint(n), "--heartbeat", "200ms"}, masterArgs...)
	j.master = startProc(t, "master", masterEnv, args...)
	j.addr = j.master.waitLine(true, regexp.MustCompile(`^\S+:\d+$`), 30*time.Second).text
	return j
}

// gensort writes records first..first+count-1 with `gantry gensort` and adds
// them to the job's input fingerprint.
func (j *job) gensort(path string, first, count int, flags ...string) {
	j.t.Helper()
	needBinary(j.t)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		j.t.Fatal(err)
	}
	args := append([]string{"gensort"}, flags...)
	args = append(args, fmt.Sprintf("-b%d", first), fmt.Sprint(count), path)
	if out, err := exec.Command(gantryBin, args...).CombinedOutput(); err != nil {
		j.t.Fatalf("gantry %v: %v\n%s", args, err, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		j.t.Fatal(err)
	}
	for off := 0; off+record.Size <= len(data); off += record.Size {
		j.sum.add(data[off : off+record.Size])
	}
}

// startWorker starts (or restarts) worker w with the same arguments.
func (j *job) startWorker(w int, env ...string) *proc {
	ws := j.workers[w]
	args := append([]string{"sort", "worker", j.addr, "-I"}, ws.inputs...)
	args = append(args, "-O", ws.out, "--tmp", ws.tmp, "--memory", "32MiB", "--bind", ws.bind, "--master-timeout", "3s")
	args = append(args, ws.extra...)
	ws.proc = startProc(j.t, fmt.Sprintf("worker %d (%s)", w, ws.bind), env, args...)
	return ws.proc
}

// workerOrder returns the workers in the master's order (its second line).
func (j *job) workerOrder() []*workerSpec {
	j.t.Helper()
	l := j.master.waitLine(true, regexp.MustCompile(`^127\.[0-9.]+(, 127\.[0-9.]+)*$`), 30*time.Second)
	var out []*workerSpec
	for ip := range strings.SplitSeq(l.text, ", ") {
		i := slices.IndexFunc(j.workers, func(w *workerSpec) bool { return w.bind == ip })
		if i < 0 {
			j.t.Fatalf("master's worker line %q names unknown IP %q", l.text, ip)
		}
		out = append(out, j.workers[i])
	}
	if len(out) != len(j.workers) {
		j.t.Fatalf("master's worker line %q: want %d IPs", l.text, len(j.workers))
	}
	return out
}

// validate checks the output in worker order, with our own reader and with
// `gantry valsort` against the input checksum.
func (j *job) validate(order []*workerSpec) []int64 {
	j.t.Helper()
	var outs, inputs []string
	for _, w := range order {
		outs = append(outs, w.out)
	}
	per := checkOutput(j.t, outs, j.sum)
	for _, w := range j.workers {
		for _, in := range w.inputs {
			ents, _ := os.ReadDir(in)
			for _, e := range ents {
				inputs = append(inputs, filepath.Join(in, e.Name()))
			}
		}
	}
	in := startProc(j.t, "valsort input", nil, append([]string{"valsort", "--checksum-only"}, inputs...)...)
	out := startProc(j.t, "valsort output", nil, append([]string{"valsort"}, outs...)...)
	inCode, inSum := in.checksum()
	outCode, outSum := out.checksum()
	if outCode != 0 {
		j.t.Fatalf("gantry valsort of the output exited %d:\n%s", outCode, strings.Join(out.stdoutLines(), "\n"))
	}
	if inCode != 0 || inSum == "" || inSum != outSum {
		j.t.Fatalf("checksum of input %q, of output %q", inSum, outSum)
	}
	return per
}

// TestEndToEnd runs a master and three workers as processes on distinct
// 127.0.0.x addresses, over binary and ASCII data in several input dirs with
// tiny and empty files, validates the output with gantry valsort against
// the input checksum and checks that every process exits within 15 s of the
// job's success.
func TestEndToEnd(t *testing.T) {
	t.Parallel() // waits on processes (main_test.go)
	j := newJob(t, 3, 20000)
	for w := range j.workers {
		j.startWorker(w)
	}
	order := j.workerOrder()
	if code := j.master.wait(2 * time.Minute); code != 0 {
		t.Fatalf("master exited %d", code)
	}
	success := j.master.waitLine(false, regexp.MustCompile(`every worker completed`), time.Second).at
	last := j.master.end
	for i, w := range j.workers {
		if code := w.proc.wait(30 * time.Second); code != 0 {
			t.Fatalf("worker %d exited %d", i, code)
		}
		if w.proc.end.After(last) {
			last = w.proc.end
		}
	}
	if d := last.Sub(success); d > 15*time.Second {
		t.Errorf("the last process exited %s after the job succeeded, want <= 15s", d)
	}
	t.Logf("all processes exited %s after success", last.Sub(success).Round(time.Millisecond))
	if got := j.master.stdoutLines(); len(got) != 2 {
		t.Errorf("master stdout = %q, want exactly 2 lines", got)
	}
	j.validate(order)
	for i, w := range j.workers {
		if ents, _ := os.ReadDir(w.tmp); len(ents) != 0 {
			t.Errorf("worker %d left %d entries in its temp dir", i, len(ents))
		}
	}
	// The master's phase table (seed 000 §9): every worker completed, with
	// its four phases' durations, as its heartbeats reported them.
	j.master.waitLine(false, regexp.MustCompile(`^WORKER\s+ADDRESS\s+STATE\s+PHASE\s+PROGRESS\s+SAMPLING\s+SORTING\s+SHUFFLING\s+MERGING$`), time.Second)
	for i := range j.workers {
		j.master.waitLine(false, regexp.MustCompile(fmt.Sprintf(`^%d\s+127\.0\.0\.\d+:\d+\s+Completed\s+COMPLETED\s+100\.0%%(\s+\d+\.\d\ds){4}$`, i)), time.Second)
	}
	checkSeedLines(t, j, true)
	for _, w := range j.workers {
		wantPrintedSuccess(t, w.proc)
	}
	// The master reports each worker's state changes once, as plain lines
	// (its log has them at debug level only).
	for i := range j.workers {
		j.master.waitLine(false, regexp.MustCompile(fmt.Sprintf(`^worker %d 127\.0\.0\.\d+:\d+: Completed \(100%%\)$`, i)), time.Second)
	}
	if log := j.master.tail(100000); strings.Contains(log, `msg="worker state"`) {
		t.Errorf("the master's stderr reports worker states twice, plain and logged:\n%s", log)
	}
	// So does each worker its own transitions ("worker: A -> B: reason").
	for i, w := range j.workers {
		if log := w.proc.tail(100000); strings.Contains(log, `msg="state transition"`) || strings.Count(log, "worker: Initializing -> Sampling: ") != 1 {
			t.Errorf("worker %d's stderr does not show its transitions once, as plain lines:\n%s", i, log)
		}
	}
	// Heartbeats come from their own goroutine: busy workers are never
	// taken for dead.
	if strings.Contains(j.master.tail(1000), "worker lost") {
		t.Error("the master took a busy worker for lost")
	}
}

// TestFaultInjection kills worker 1 with SIGKILL in each phase, wipes its
// temp dir, restarts it with the same arguments and checks that the job
// completes with valid output while the other workers keep running.
func TestFaultInjection(t *testing.T) {
	t.Parallel() // waits on killed and restarted workers (main_test.go)
	cases := []struct {
		phase   string
		points  string // where the victim stops before it is killed
		want    string // the state it must be in
		keepTmp bool   // restart without wiping the temp dir
		reuse   string // what the restarted process must say it reuses
	}{
		{phase: "sampling", points: "Sampling", want: "Sampling"},
		{phase: "sorting", points: "Sorting", want: "Sorting"},
		// It stops after its first piece, and its streams to peers stop
		// before their last chunk: peers hold half-sent data to discard.
		{phase: "shuffling", points: "shuffle-piece,serve-last-chunk", want: "Shuffling"},
		{phase: "merging", points: "merge-partition", want: "Merging"},
		// With its temp dir kept, the new process finds the persisted
		// state, says where its predecessor stopped, and redoes only what
		// is unfinished: it fetches no piece it had received and merges
		// no partition it had staged.
		{phase: "merging-tmp-kept", points: "merge-partition", want: "Merging", keepTmp: true,
			reuse: `partitions_merged=[1-9]\d* pieces_received=\d+ pieces_to_fetch=0`},
		{phase: "shuffling-tmp-kept", points: "shuffle-piece", want: "Shuffling", keepTmp: true,
			reuse: `partitions_merged=\d+ pieces_received=[1-9]\d* pieces_to_fetch=\d+`},
	}
	for _, c := range cases {
		t.Run(c.phase, func(t *testing.T) {
			j := newJob(t, 3, 12000)
			victim := 1
			v := j.startStopping(victim, c.points, c.want)
			if c.phase == "shuffling" {
				// Kill it only once a peer has staged part of its data.
				vi := slices.Index(j.workerOrder(), j.workers[victim])
				waitStaged(t, []string{j.workers[0].tmp, j.workers[2].tmp}, vi)
			}
			if err := v.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			v.wait(10 * time.Second)
			if !c.keepTmp {
				if err := os.RemoveAll(j.workers[victim].tmp); err != nil {
					t.Fatal(err)
				}
			}
			others := []*proc{j.workers[0].proc, j.workers[2].proc}
			j.startWorker(victim)
			if c.keepTmp {
				nv := j.workers[victim].proc
				nv.waitLine(false, regexp.MustCompile(`a previous run of this worker stopped here.*previous_state=`+c.want), time.Minute)
				nv.waitLine(false, regexp.MustCompile(`reusing what the previous process of this worker did in this job.* `+c.reuse), time.Minute)
				// What it fetched is what it had not received.
				m := nv.waitLine(false, regexp.MustCompile(`shuffle complete" pieces_fetched=(\d+) pieces_reused=(\d+)`), time.Minute)
				if got := regexp.MustCompile(`pieces_to_fetch=(\d+)`).FindStringSubmatch(nv.tail(1000)); got == nil || !strings.Contains(m.text, "pieces_fetched="+got[1]+" ") {
					t.Errorf("the restarted worker said it would fetch %v pieces, then: %s", got, m.text)
				}
			}
			order := j.workerOrder()
			if code := j.master.wait(2 * time.Minute); code != 0 {
				t.Fatalf("master exited %d", code)
			}
			j.master.waitLine(false, regexp.MustCompile(`worker came back.*worker=`+fmt.Sprint(slices.Index(order, j.workers[victim]))), time.Second)
			for i, w := range j.workers {
				if code := w.proc.wait(30 * time.Second); code != 0 {
					t.Fatalf("worker %d exited %d", i, code)
				}
			}
			// The others ran once, one process each, and never re-registered.
			for _, p := range others {
				if p.code != 0 {
					t.Errorf("%s exited %d", p.name, p.code)
				}
			}
			if n := len(regexp.MustCompile(`worker came back`).FindAllString(j.master.tail(1000), -1)); n != 1 {
				t.Errorf("master saw %d workers come back, want 1", n)
			}
			if c.phase == "shuffling" {
				// Peers held the victim's half-sent pieces: they must have
				// dropped them rather than count them.
				re := regexp.MustCompile(`discarded an incomplete shuffle piece" sender=` + fmt.Sprint(slices.Index(order, j.workers[victim])))
				if !re.MatchString(others[0].tail(1000)) && !re.MatchString(others[1].tail(1000)) {
					t.Error("no peer discarded a half-sent piece from the killed worker")
				}
			}
			j.validate(order)
		})
	}
}

// startStopping starts the job's workers, victim with the fault points
// (GANTRY_DSORT_FAULT), and returns victim's process once it has reached
// each of them in state want.
func (j *job) startStopping(victim int, points, want string) *proc {
	j.t.Helper()
	for w := range j.workers {
		if w == victim {
			j.startWorker(w, "GANTRY_DSORT_FAULT="+points)
		} else {
			j.startWorker(w)
		}
	}
	v := j.workers[victim].proc
	for p := range strings.SplitSeq(points, ",") {
		v.waitLine(false, regexp.MustCompile(`fault point `+p+` reached`), time.Minute)
	}
	v.waitLine(false, regexp.MustCompile(`-> `+want+`:`), time.Second)
	return v
}

// waitStaged waits until one of the temp dirs holds a non-empty staged
// piece from sender vi (the workers are other processes: their files are
// polled).
func waitStaged(t *testing.T, tmps []string, vi int) {
	t.Helper()
	testutil.WaitFor(t, time.Minute, fmt.Sprintf("a peer to stage data from worker %d", vi), func() (bool, string) {
		for _, tmp := range tmps {
			parts, _ := filepath.Glob(filepath.Join(tmp, "*", "recv", fmt.Sprintf("p*.s%d.e*.part", vi)))
			for _, p := range parts {
				if info, err := os.Stat(p); err == nil && info.Size() > 0 {
					return true, ""
				}
			}
		}
		return false, "no non-empty staged piece yet"
	})
}

// TestAbortWhenWorkerNeverReturns: a worker killed and not restarted makes
// the master abort after --rejoin-timeout; every process exits non-zero
// with a message saying why.
func TestAbortWhenWorkerNeverReturns(t *testing.T) {
	t.Parallel() // waits on a 3 s rejoin timeout (main_test.go)
	j := newJob(t, 3, 6000, "--rejoin-timeout", "3s")
	for w := range j.workers {
		if w == 2 {
			j.startWorker(w, "GANTRY_DSORT_FAULT=Sorting")
		} else {
			j.startWorker(w)
		}
	}
	v := j.workers[2].proc
	v.waitLine(false, regexp.MustCompile(`fault point Sorting reached`), time.Minute)
	// `gantry sort status` shows every worker's state, phase, progress and
	// phase durations.
	st := startProc(t, "status", nil, "sort", "status", j.addr)
	if code := st.wait(30 * time.Second); code != 0 {
		t.Fatalf("gantry sort status exited %d", code)
	}
	out := strings.Join(st.stdoutLines(), "\n")
	for _, re := range []string{`job \w+: sorting, 3/3 workers registered`, `WORKER\s+ADDRESS\s+STATE\s+PHASE\s+PROGRESS\s+SAMPLING`,
		`127\.0\.0\.4:\d+\s+Sorting\s+SORTING\s+\d+\.\d%\s+\d+\.\d\ds\s+\d+\.\d\ds…`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status output does not match %q:\n%s", re, out)
		}
	}
	v.cmd.Process.Signal(syscall.SIGKILL)
	if code := j.master.wait(time.Minute); code == 0 {
		t.Fatal("master exited 0 after a worker never came back")
	}
	j.master.waitLine(false, regexp.MustCompile(`job aborted: worker \d+ \(127\.0\.0\.4:\d+\) has been silent .* did not come back`), time.Second)
	for _, w := range j.workers[:2] {
		if code := w.proc.wait(30 * time.Second); code == 0 {
			t.Errorf("%s exited 0 after the job was aborted", w.proc.name)
		}
		w.proc.waitLine(false, regexp.MustCompile(`job aborted: worker \d+ .* did not come back`), time.Second)
		// It waited for the shuffle signal, which never came: worker 2 never
		// finished sorting.
		wantPrintedFailure(t, w.proc, `^dsort: job aborted: worker \d \(127\.0\.0\.4:\d+\) has been silent .* did not come back`)
		if h, _ := printedHistory(t, w.proc); !strings.Contains(h[len(h)-1], "] WaitingForShuffleSignal -> Failed: ") {
			t.Errorf("%s's history ends %q, want it to fail while waiting for the shuffle signal", w.proc.name, h[len(h)-1])
		}
	}
	checkSeedLines(t, &job{master: j.master, workers: j.workers[:2]}, false)
}

// checkSeedLines checks seed 003's lines in the logs of the master and the
// workers of a job that ended: its phase lines (when completed), then the
// shutdown's, in order.
func checkSeedLines(t *testing.T, j *job, completed bool) {
	t.Helper()
	var worker []string
	if completed {
		worker = []string{"Phase 1/4: Sampling...", "✓ Sampling complete", "Phase 2/4: Sorting...", "✓ Sorting complete",
			"Phase 3/4: Shuffling...", "✓ Shuffling complete", "Phase 4/4: Merging...", "✓ Merging complete", "✓ All phases complete!"}
	}
	worker = append(worker, "Received shutdown signal from Master", "Shutting down...", "Shutdown complete")
	check := func(p *proc, want []string) {
		log := p.tail(100000)
		at := 0
		for _, w := range want {
			i := strings.Index(log[at:], "msg=\""+w)
			if i < 0 {
				t.Errorf("%s's log lacks %q after offset %d:\n%s", p.name, w, at, log)
				return
			}
			at += i
		}
	}
	check(j.master, []string{"Stopping Master node...", "Master node stopped"})
	for _, w := range j.workers {
		check(w.proc, worker)
	}
}

// TestInterruptCleansUp: SIGINT to a worker in the middle of the job aborts
// it; every process exits non-zero within 15 s, both workers end in Failed
// and leave no runs or received pieces behind, nor anything in their
// output dirs.
func TestInterruptCleansUp(t *testing.T) {
	t.Parallel() // waits on processes exiting (main_test.go)
	j := newJob(t, 2, 6000)
	j.startWorker(0)
	v := j.startWorker(1, "GANTRY_DSORT_FAULT=Sorting")
	v.waitLine(false, regexp.MustCompile(`fault point Sorting reached`), time.Minute)
	start := time.Now()
	if err := v.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{v, j.workers[0].proc, j.master} {
		if code := p.wait(15 * time.Second); code == 0 {
			t.Errorf("%s exited 0 after an interrupted job", p.name)
		}
	}
	t.Logf("all processes exited %s after SIGINT", time.Since(start).Round(time.Millisecond))
	j.master.waitLine(false, regexp.MustCompile(`job aborted: worker \d+ \(127\.0\.0\.3:\d+\) failed: context canceled`), time.Second)
	// Both end in Failed (seed 000 §5.1): the interrupted one, and the one
	// whose job the master aborted.
	wantPrintedFailure(t, v, `^context canceled$`)
	wantPrintedFailure(t, j.workers[0].proc, `^dsort: job aborted: worker \d \(127\.0\.0\.3:\d+\) failed: context canceled$`)
	for i, w := range j.workers {
		err := filepath.WalkDir(w.tmp, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				t.Errorf("worker %d left %s behind", i, path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if ents, _ := os.ReadDir(w.out); len(ents) != 0 {
			t.Errorf("worker %d left %d files in its output dir", i, len(ents))
		}
	}
}

// TestWorkersExitWhenMasterDies: a master killed mid-job leaves no worker
// running: they stop hearing from it and exit non-zero, cleaning up.
func TestWorkersExitWhenMasterDies(t *testing.T) {
	t.Parallel() // waits on a 3 s master timeout (main_test.go)
	j := newJob(t, 2, 6000)
	j.startWorker(0)
	v := j.startWorker(1, "GANTRY_DSORT_FAULT=Sorting")
	v.waitLine(false, regexp.MustCompile(`fault point Sorting reached`), time.Minute)
	j.master.cmd.Process.Signal(syscall.SIGKILL)
	for _, w := range j.workers {
		if code := w.proc.wait(30 * time.Second); code == 0 {
			t.Errorf("%s exited 0 after its master died", w.proc.name)
		}
		w.proc.waitLine(false, regexp.MustCompile(`lost contact with the master: no reply from \S+ for 3s`), time.Second)
		wantPrintedFailure(t, w.proc, `^dsort: lost contact with the master: no reply from \S+ for 3s`)
	}
}

// TestMasterInterruptAbortsJob: SIGINT to the master aborts the job; it tells
// the workers, and every process exits non-zero within 15 s.
func TestMasterInterruptAbortsJob(t *testing.T) {
	t.Parallel() // waits on processes exiting (main_test.go)
	j := newJob(t, 2, 6000)
	j.startWorker(0)
	v := j.startWorker(1, "GANTRY_DSORT_FAULT=Sorting")
	v.waitLine(false, regexp.MustCompile(`fault point Sorting reached`), time.Minute)
	start := time.Now()
	j.master.cmd.Process.Signal(syscall.SIGINT)
	for _, p := range []*proc{j.master, j.workers[0].proc, v} {
		if code := p.wait(15 * time.Second); code == 0 {
			t.Errorf("%s exited 0 after the master was interrupted", p.name)
		}
	}
	t.Logf("all processes exited %s after SIGINT", time.Since(start).Round(time.Millisecond))
	for _, w := range j.workers {
		w.proc.waitLine(false, regexp.MustCompile(`job aborted: the master was interrupted`), time.Second)
		wantPrintedFailure(t, w.proc, `^dsort: job aborted: the master was interrupted$`)
	}
}

// TestWatchdogEndsAHungShutdown: every shutdown step of a worker hangs (the
// bounds add up to more than 15 s); seed 003's watchdog ends the process
// 15 s after the master's shutdown signal, saying so, with status 0: the
// job had succeeded and its output is committed.
func TestWatchdogEndsAHungShutdown(t *testing.T) {
	t.Parallel() // waits on its 15 s watchdog (main_test.go)
	j := newJob(t, 1, 4000)
	var points []string
	for _, s := range shutdownOrder {
		points = append(points, "shutdown-"+s)
	}
	w := j.startWorker(0, "GANTRY_DSORT_FAULT="+strings.Join(points, ","))
	order := j.workerOrder()
	signal := w.waitLine(false, regexp.MustCompile(`Received shutdown signal from Master`), time.Minute).at
	if code := w.wait(30 * time.Second); code != 0 {
		t.Fatalf("worker exited %d, want 0 (the job succeeded)", code)
	}
	if el := w.end.Sub(signal); el < 14*time.Second || el > 16*time.Second {
		t.Errorf("worker exited %s after the shutdown signal, want 15s ± 1s", el.Round(time.Millisecond))
	}
	w.waitLine(false, regexp.MustCompile(`Shutdown timeout - forcing exit`), time.Second)
	if strings.Contains(w.tail(100000), "Shutdown complete") {
		t.Error("the hung shutdown completed")
	}
	if code := j.master.wait(30 * time.Second); code != 0 {
		t.Fatalf("master exited %d", code)
	}
	j.validate(order)
}
