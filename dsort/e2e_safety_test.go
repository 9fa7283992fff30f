package dsort

// Process-level tests of output safety: where the master listens, and the paths
// and outputs a worker must never destroy.

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/record"
)

// TestMasterBind checks that `sort master` listens on loopback by default,
// on the --bind address when given (and prints that address), and refuses
// a --bind that is not an IP, naming the flag.
func TestMasterBind(t *testing.T) {
	needBinary(t)
	addrLine := regexp.MustCompile(`^\S+:\d+$`)
	for _, tc := range []struct {
		name string
		args []string
		host string
	}{
		{"default", nil, "127.0.0.1"},
		{"bind", []string{"--bind", "127.0.0.9"}, "127.0.0.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startProc(t, "master", nil, append([]string{"sort", "master", "2"}, tc.args...)...)
			addr := m.waitLine(true, addrLine, 30*time.Second).text
			host, _, err := net.SplitHostPort(addr)
			if err != nil || host != tc.host {
				t.Fatalf("master printed %q, want host %s", addr, tc.host)
			}
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("master does not listen on the address it printed: %v", err)
			}
			c.Close()
		})
	}
	t.Run("invalid", func(t *testing.T) {
		m := startProc(t, "master", nil, "sort", "master", "2", "--bind", "not-an-ip")
		if code := m.wait(30 * time.Second); code == 0 {
			t.Fatal("master accepted --bind not-an-ip")
		}
		if got := m.tail(10); !strings.Contains(got, "--bind") {
			t.Fatalf("error does not name --bind:\n%s", got)
		}
	})
}

// TestWorkerRefusesOverlappingDirs checks that `sort worker` refuses an
// output in place of, or inside, an input and a temp dir inside an input,
// exits non-zero with a message naming the directories, and leaves every
// file where it was (no master runs: it must not even try to register).
func TestWorkerRefusesOverlappingDirs(t *testing.T) {
	needBinary(t)
	root := t.TempDir()
	in := filepath.Join(root, "in")
	writeFile(t, filepath.Join(in, "partition.0"), "a previous output, now an input\n")
	writeFile(t, filepath.Join(in, "sub", "partition.1"), "another\n")
	before := treeSum(t, root)
	for _, tc := range []struct {
		name, out, tmp, want string
	}{
		{"in place", in, filepath.Join(root, "tmp"), "is the input directory"},
		{"output inside input", filepath.Join(in, "sub"), filepath.Join(root, "tmp"), "is inside the input directory"},
		{"tmp inside input", filepath.Join(root, "out"), filepath.Join(in, "tmp"), "temp directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProc(t, "worker", nil, "sort", "worker", "127.0.0.1:1", "-I", in, "-O", tc.out, "--tmp", tc.tmp)
			if code := p.wait(30 * time.Second); code == 0 {
				t.Fatal("worker accepted overlapping directories")
			}
			if got := p.tail(5); !strings.Contains(got, tc.want) || !strings.Contains(got, in) {
				t.Errorf("error should say %q and name %s:\n%s", tc.want, in, got)
			}
			if after := treeSum(t, root); !maps.Equal(before, after) {
				t.Errorf("files changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// treeSum maps every file and directory under root to a digest of its
// content ("dir" for directories).
func treeSum(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%x", sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// startWorkerWith starts worker w like startWorker, with extra arguments.
func (j *job) startWorkerWith(w int, env []string, extra ...string) *proc {
	ws := j.workers[w]
	args := append([]string{"sort", "worker", j.addr, "-I"}, ws.inputs...)
	args = append(args, "-O", ws.out, "--tmp", ws.tmp, "--memory", "32MiB", "--bind", ws.bind, "--master-timeout", "3s")
	ws.proc = startProc(j.t, fmt.Sprintf("worker %d (%s)", w, ws.bind), env, append(args, extra...)...)
	return ws.proc
}

// workDirs lists the worker temp dirs under tmp.
func workDirs(t *testing.T, tmp string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(tmp, "gantry-dsort-*"))
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestRestartAfterCompletedAndRerunKeepOutput kills a worker after it has
// reported Completed, before it heard that the job succeeded (its
// partitions are still staged under hidden names, not partition.<n>), and
// restarts it with the same arguments while the master is still there: the
// master answers that the job succeeded, the new process commits the staged
// partitions and exits 0, and the output is valid. Then, with the master
// gone, it re-runs worker 1's exact command: "already completed", exit 0
// at once, nothing changed. Worker 0 (its commit finished for a killed
// predecessor), worker 1 with one input rewritten (same size and mtime)
// or with --rerun do not claim completion: each gives up naming the
// master, exits non-zero and leaves the output unchanged.
func TestRestartAfterCompletedAndRerunKeepOutput(t *testing.T) {
	t.Parallel() // waits on processes that give up (main_test.go)
	j := newJob(t, 2, 8000)
	victim := 0
	j.startWorker(victim, "GANTRY_DSORT_FAULT=completed")
	j.startWorker(1)
	v := j.workers[victim].proc
	v.waitLine(false, regexp.MustCompile(`fault point completed reached`), time.Minute)
	j.master.waitLine(false, regexp.MustCompile(`every worker completed`), time.Minute)
	if parts, _ := filepath.Glob(filepath.Join(j.workers[victim].out, "partition.*")); len(parts) != 0 {
		t.Errorf("before commit the output already holds %v", parts)
	}
	if err := v.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	v.wait(10 * time.Second)
	again := j.startWorker(victim)
	if code := again.wait(time.Minute); code != 0 {
		t.Fatalf("restarted worker exited %d", code)
	}
	again.waitLine(false, regexp.MustCompile(`the job already succeeded`), time.Second)
	order := j.workerOrder()
	if code := j.master.wait(time.Minute); code != 0 {
		t.Fatalf("master exited %d", code)
	}
	if code := j.workers[1].proc.wait(30 * time.Second); code != 0 {
		t.Fatalf("worker 1 exited %d", code)
	}
	j.validate(order)
	for _, w := range j.workers {
		if _, err := os.Stat(filepath.Join(w.out, record.DoneMarker)); err != nil {
			t.Errorf("no completion marker: %v", err)
		}
		if d := workDirs(t, w.tmp); len(d) != 0 {
			t.Errorf("temp dirs left behind: %v", d)
		}
	}

	// The master has exited: a re-run of worker 1's command (its output
	// committed by itself) has nothing to do (seed 000 §8.1): it says so
	// and exits 0 at once, leaving everything as it is. "At once" is the
	// 1 s completedProbe plus a process start: 3 s leaves room for a
	// race-built binary on a loaded 2-core machine and still tells it from
	// a worker that waited out the 30 s default --register-timeout.
	before := treeSum(t, j.root)
	start := time.Now()
	rerun := j.startWorker(1)
	if code := rerun.wait(time.Minute); code != 0 {
		t.Fatalf("a re-run after success exited %d:\n%s", code, rerun.tail(20))
	}
	if el := rerun.end.Sub(start); el > 3*time.Second {
		t.Errorf("the re-run took %s, want <= 3s", el.Round(time.Millisecond))
	}
	rerun.waitLine(false, regexp.MustCompile(`already completed, nothing to do: .* holds job \w+'s committed output`), time.Second)
	if after := treeSum(t, j.root); !maps.Equal(before, after) {
		t.Errorf("a re-run after success changed files:\nbefore %v\nafter  %v", before, after)
	}

	// No claim of completion, the worker looks for its master as always,
	// gives up naming it and leaves everything as it was: for worker 0,
	// whose commit a restarted process finished for its killed predecessor
	// (it cannot vouch for the inputs the partitions came from); for
	// worker 1 with other inputs (same size and modification time, other
	// records); and with --rerun.
	in := filepath.Join(j.workers[1].inputs[0], "binary")
	fi, err := os.Stat(in)
	if err != nil {
		t.Fatal(err)
	}
	noClaim := func(w int, extra ...string) {
		t.Helper()
		before := treeSum(t, j.root)
		other := j.startWorkerWith(w, nil, append([]string{"--register-timeout", "2s"}, extra...)...)
		if code := other.wait(time.Minute); code == 0 {
			t.Fatalf("worker %d %v whose master is gone exited 0:\n%s", w, extra, other.tail(20))
		}
		msg := other.tail(20)
		if strings.Contains(msg, "already completed") || !strings.Contains(msg, j.addr) || !strings.Contains(msg, "left as it was") {
			t.Errorf("worker %d %v should not claim completion, name the master %s and say the output was left as it was:\n%s", w, extra, j.addr, msg)
		}
		if after := treeSum(t, j.root); !maps.Equal(before, after) {
			t.Errorf("worker %d %v changed files:\nbefore %v\nafter  %v", w, extra, before, after)
		}
	}
	noClaim(victim)
	noClaim(1, "--rerun")
	j.gensort(in, 1_000_000, int(fi.Size()/record.Size))
	if err := os.Chtimes(in, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	noClaim(1)
}

// TestTurnedAwayWorkersDeleteNothing starts a two-worker job with a token
// whose workers are held in Sampling, then workers that must be turned
// away (a wrong token; one worker too many) and worker 0's command a second
// time (its temp dir is locked): each exits non-zero with a clear message,
// every earlier output file stays as it was, and the master logs each
// refused call and keeps its job.
func TestTurnedAwayWorkersDeleteNothing(t *testing.T) {
	t.Parallel() // waits on processes turned away (main_test.go)
	j := newJob(t, 3, 2000, "--token", "s3cret")
	// Three workers' data, a master for two: worker 2 is one too many.
	j.master.cmd.Process.Kill()
	j.master.wait(10 * time.Second)
	j.master = startProc(t, "master", nil, "sort", "master", "2", "--heartbeat", "200ms", "--token", "s3cret")
	j.addr = j.master.waitLine(true, regexp.MustCompile(`^\S+:\d+$`), 30*time.Second).text
	for _, w := range j.workers {
		writeFile(t, filepath.Join(w.out, "partition.0"), "an earlier job's output\n")
	}
	before := treeSum(t, j.root)

	wrong := j.startWorkerWith(2, nil, "--token", "wrong")
	if code := wrong.wait(time.Minute); code == 0 {
		t.Fatal("a worker with a wrong token exited 0")
	}
	if got := wrong.tail(10); !strings.Contains(got, "token") {
		t.Errorf("the turned-away worker should say why:\n%s", got)
	}
	wantPrintedFailure(t, wrong, `^dsort: register with master \S+: .*token`)
	j.master.waitLine(false, regexp.MustCompile(`refused call.*RegisterWorker.*token`), 10*time.Second)

	for w := range 2 {
		j.startWorkerWith(w, []string{"GANTRY_DSORT_FAULT=Sampling"}, "--token", "s3cret")
		j.workers[w].proc.waitLine(false, regexp.MustCompile(`fault point Sampling reached`), time.Minute)
	}
	extra := j.startWorkerWith(2, nil, "--token", "s3cret")
	if code := extra.wait(time.Minute); code == 0 {
		t.Fatal("a third worker for a two-worker job exited 0")
	}
	if got := extra.tail(10); !strings.Contains(got, "already has its 2 workers") {
		t.Errorf("the extra worker should say the job is full:\n%s", got)
	}
	j.master.waitLine(false, regexp.MustCompile(`refused call.*RegisterWorker.*already has its 2 workers`), 10*time.Second)

	dup := startProc(t, "duplicate worker 0", nil, append([]string{"sort", "worker", j.addr, "-I"},
		append(j.workers[0].inputs, "-O", j.workers[0].out, "--tmp", j.workers[0].tmp, "--memory", "32MiB",
			"--bind", j.workers[0].bind, "--token", "s3cret")...)...)
	if code := dup.wait(time.Minute); code == 0 {
		t.Fatal("a second process of worker 0 exited 0")
	}
	if got := dup.tail(10); !strings.Contains(got, "another process of this worker") {
		t.Errorf("the duplicate should say another process owns the temp dir:\n%s", got)
	}
	if after := treeSum(t, j.root); !maps.Equal(before, withoutTmp(after, before)) {
		t.Errorf("turned-away workers changed files:\nbefore %v\nafter  %v", before, after)
	}
	if strings.Contains(j.master.tail(1000), "worker came back") {
		t.Error("the duplicate process replaced worker 0 in the job")
	}
}

// withoutTmp drops from after the entries under the workers' temp dirs that
// before does not have: live workers own files there.
func withoutTmp(after, before map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range after {
		if _, ok := before[k]; ok || !strings.Contains(k, "tmp") {
			out[k] = v
		}
	}
	return out
}

// TestMasterAbortsWhenWorkerNeverRegisters runs a 2-worker job where only
// one worker starts: the master aborts after --register-timeout naming the
// missing worker, the worker exits non-zero, and its earlier output stays;
// the worker swept the temp dir of a worker dead for over an hour at start
// and removed its own.
func TestMasterAbortsWhenWorkerNeverRegisters(t *testing.T) {
	t.Parallel() // waits on a 3 s register timeout (main_test.go)
	j := newJob(t, 2, 2000, "--register-timeout", "3s")
	writeFile(t, filepath.Join(j.workers[0].out, "partition.0"), "an earlier job's output\n")
	before := treeSum(t, j.workers[0].out)
	// A temp dir left by a dead worker (its lock is free): swept at start.
	stale, err := fsutil.LockDir(filepath.Join(j.workers[0].tmp, "gantry-dsort-0123456789ab"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(stale.Path, "runs", "run-0"), "spilled run\n")
	stale.Release()
	// Dead for over keepDeadWorkDir: no restart of it will come for it.
	past := time.Now().Add(-2 * keepDeadWorkDir)
	if err := os.Chtimes(stale.Path, past, past); err != nil {
		t.Fatal(err)
	}
	w := j.startWorker(0)
	w.waitLine(false, regexp.MustCompile(`removed temp dirs of workers that are gone`), time.Minute)
	if code := j.master.wait(time.Minute); code == 0 {
		t.Fatal("master exited 0 with a worker missing")
	}
	j.master.waitLine(false, regexp.MustCompile(`only 1 of 2 workers registered.*missing: worker 1`), time.Second)
	if code := w.wait(time.Minute); code == 0 {
		t.Fatal("worker exited 0 after the job aborted")
	}
	if after := treeSum(t, j.workers[0].out); !maps.Equal(before, after) {
		t.Errorf("an aborted job changed the output:\nbefore %v\nafter  %v", before, after)
	}
	if d := workDirs(t, j.workers[0].tmp); len(d) != 0 {
		t.Errorf("temp dirs left behind: %v", d)
	}
}

// TestMasterRestartResumesJob SIGKILLs the master while worker 0 is held
// in each phase (sampling, sorting, shuffling, merging), restarts it with the
// same --state file and port, then releases worker 0: the restarted master
// re-adopts the running workers, the job succeeds, every process exits 0
// and the output's checksum equals the input's.
func TestMasterRestartResumesJob(t *testing.T) {
	for _, c := range []struct{ phase, point string }{
		{"sampling", "Sampling"}, {"sorting", "Sorting"}, {"shuffling", "shuffle-piece"}, {"merging", "merge-partition"},
	} {
		t.Run(c.phase, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "master.json")
			j := newJob(t, 3, 6000, "--state", state)
			release := filepath.Join(j.root, "release")
			j.startWorkerWith(0, []string{"GANTRY_DSORT_FAULT=" + c.point, "GANTRY_DSORT_FAULT_UNTIL=" + release}, "--master-timeout", "30s")
			for w := 1; w < len(j.workers); w++ {
				j.startWorkerWith(w, nil, "--master-timeout", "30s")
			}
			order := j.workerOrder()
			j.workers[0].proc.waitLine(false, regexp.MustCompile(`fault point `+c.point+` reached`), time.Minute)
			// Every worker has its registration reply: one still in flight
			// would (rightly) register again with the new master.
			for _, w := range j.workers {
				w.proc.waitLine(false, regexp.MustCompile(`msg=registered`), time.Minute)
			}
			if err := j.master.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			j.master.wait(10 * time.Second)
			_, port, _ := net.SplitHostPort(j.addr)
			j.master = startProc(t, "restarted master", nil, "sort", "master", "3", "--heartbeat", "200ms",
				"--state", state, "--port", port)
			j.master.waitLine(false, regexp.MustCompile(`resuming the job from its state file`), 30*time.Second)
			writeFile(t, release, "go\n")
			if code := j.master.wait(2 * time.Minute); code != 0 {
				t.Fatalf("restarted master exited %d", code)
			}
			for i, w := range j.workers {
				if code := w.proc.wait(30 * time.Second); code != 0 {
					t.Fatalf("worker %d exited %d", i, code)
				}
			}
			if log := j.master.tail(1000); regexp.MustCompile(`worker registered|worker came back`).MatchString(log) {
				t.Errorf("the restarted master took workers in again instead of re-adopting them:\n%s", log)
			}
			j.validate(order)
		})
	}
}

// TestMasterRestartAfterSuccessLetsWorkerCommit covers the narrowest
// window: worker 0 has reported Completed but has not heard that the job
// succeeded (its partitions are still staged) when both it and the master
// are SIGKILLed. A master restarted with the same --state knows the job
// succeeded; worker 0's restarted process hears "the job succeeded, your
// partitions are final", commits the staged partitions and exits 0, and the
// output is valid.
func TestMasterRestartAfterSuccessLetsWorkerCommit(t *testing.T) {
	state := filepath.Join(t.TempDir(), "master.json")
	j := newJob(t, 2, 4000, "--state", state)
	j.startWorker(0, "GANTRY_DSORT_FAULT=completed")
	j.startWorker(1)
	order := j.workerOrder()
	j.workers[0].proc.waitLine(false, regexp.MustCompile(`fault point completed reached`), time.Minute)
	j.master.waitLine(false, regexp.MustCompile(`every worker completed`), time.Minute)
	j.workers[1].proc.waitLine(false, regexp.MustCompile(`output committed`), time.Minute)
	for _, p := range []*proc{j.master, j.workers[0].proc} {
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		p.wait(10 * time.Second)
	}
	if code := j.workers[1].proc.wait(30 * time.Second); code != 0 {
		t.Fatalf("worker 1 exited %d", code)
	}
	_, port, _ := net.SplitHostPort(j.addr)
	j.master = startProc(t, "restarted master", nil, "sort", "master", "2", "--heartbeat", "200ms",
		"--state", state, "--port", port)
	j.master.waitLine(false, regexp.MustCompile(`resuming the job from its state file.*phase=succeeded`), 30*time.Second)
	again := j.startWorker(0)
	if code := again.wait(time.Minute); code != 0 {
		t.Fatalf("restarted worker 0 exited %d", code)
	}
	again.waitLine(false, regexp.MustCompile(`output committed`), time.Second)
	if code := j.master.wait(time.Minute); code != 0 {
		t.Fatalf("restarted master exited %d", code)
	}
	j.validate(order)
}
