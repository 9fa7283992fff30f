package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	dockerWorkers = 3
	// Records per worker: 20 MB each. Enough for every phase to take a
	// moment, small enough for the whole test to stay well under 3 minutes.
	dockerRecords = 200_000
	masterPort    = "7070"
)

// dockerJob is one distributed sort across containers: a master and
// dockerWorkers workers, each worker with its own bind-mounted data dir.
type dockerJob struct {
	c       *cluster
	t       *testing.T
	master  *container
	workers []*container
	inSum   string // checksum of every input record
}

// newDockerJob generates the input and creates (but does not start) the
// containers. masterArgs are extra `sort master` flags.
func newDockerJob(t *testing.T, c *cluster, scenario int, masterArgs ...string) *dockerJob {
	t.Helper()
	j := &dockerJob{c: c, t: t}
	// This scenario's addresses: .N2 (master) to .N5, fixed so that a
	// restarted or reconnected worker keeps its address.
	ip := func(i int) string { return fmt.Sprintf("%s.%d", c.prefix, 10*scenario+2+i) }
	j.master = &container{c: c, name: fmt.Sprintf("gantry-e2e-%s-%d-master", c.id, scenario), ip: ip(0),
		args: append([]string{"sort", "master", strconv.Itoa(dockerWorkers), "--port", masterPort}, masterArgs...)}
	if c.masterBind {
		j.master.args = append(j.master.args, "--bind", ip(0))
	}
	t.Cleanup(func() { cleanupDocker(t, "rm", "-f", j.master.name) })
	var inputs []string
	for i := range dockerWorkers {
		dir := t.TempDir()
		for _, d := range []string{"in", "out", "tmp"} {
			if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		j.gantry("gensort", "-b", strconv.Itoa(i*dockerRecords), strconv.Itoa(dockerRecords), filepath.Join(dir, "in", "data"))
		inputs = append(inputs, filepath.Join(dir, "in"))
		w := &container{c: c, name: fmt.Sprintf("gantry-e2e-%s-%d-w%d", c.id, scenario, i), ip: ip(1 + i), dir: dir,
			args: []string{"sort", "worker", ip(0) + ":" + masterPort, "-I", "/data/in", "-O", "/data/out",
				"--tmp", "/data/tmp", "--memory", "128MiB", "--master-timeout", "10s"}}
		t.Cleanup(func() { cleanupDocker(t, "rm", "-f", w.name) })
		j.workers = append(j.workers, w)
	}
	stdout, stderr := j.gantry(append([]string{"valsort", "--checksum-only"}, inputs...)...)
	j.inSum = checksumOf(t, stdout+stderr)
	return j
}

// gantry runs the static binary on the host and returns its output; it
// fails the test on a non-zero exit.
func (j *dockerJob) gantry(args ...string) (stdout, stderr string) {
	j.t.Helper()
	cmd := exec.Command(j.c.bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		j.t.Fatalf("gantry %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), errb.String()
}

var checksumRE = regexp.MustCompile(`(?m)^Checksum: ([0-9a-f]+)$`)

func checksumOf(t *testing.T, report string) string {
	t.Helper()
	m := checksumRE.FindStringSubmatch(report)
	if m == nil {
		t.Fatalf("no checksum in valsort's report:\n%s", report)
	}
	return m[1]
}

// start starts the master, then every worker.
func (j *dockerJob) start(workerEnv map[int][]string) {
	j.t.Helper()
	j.master.run()
	for i, w := range j.workers {
		w.run(workerEnv[i]...)
	}
}

// succeed waits for every container to exit 0 and checks the output: the
// workers' partitions, concatenated in the order the master printed, pass
// valsort with the input's checksum.
func (j *dockerJob) succeed() {
	j.t.Helper()
	if code := j.master.wait(90 * time.Second); code != 0 {
		_, e := j.master.logs()
		j.t.Fatalf("master exited %d:\n%s", code, tail(e, 40))
	}
	for _, w := range j.workers {
		if code := w.wait(30 * time.Second); code != 0 {
			_, e := w.logs()
			j.t.Fatalf("%s exited %d:\n%s", w.name, code, tail(e, 40))
		}
	}
	stdout, _ := j.master.logs()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 || lines[0] != j.master.ip+":"+masterPort {
		j.t.Fatalf("master stdout %q: want its address %s:%s, then the workers' IPs", stdout, j.master.ip, masterPort)
	}
	var outs []string
	for _, ip := range strings.Split(lines[1], ", ") {
		found := false
		for _, w := range j.workers {
			if w.ip == ip {
				outs = append(outs, filepath.Join(w.dir, "out"))
				found = true
			}
		}
		if !found {
			j.t.Fatalf("master's worker line %q names %s, not one of the workers", lines[1], ip)
		}
	}
	if len(outs) != dockerWorkers {
		j.t.Fatalf("master's worker line %q: want %d workers", lines[1], dockerWorkers)
	}
	vout, verr := j.gantry(append([]string{"valsort"}, outs...)...)
	report := vout + verr
	if !strings.Contains(report, "SUCCESS - all records are in order") {
		j.t.Fatalf("valsort of the output:\n%s", report)
	}
	if got := checksumOf(j.t, report); got != j.inSum {
		j.t.Fatalf("output checksum %s, input's %s", got, j.inSum)
	}
	if !strings.Contains(report, fmt.Sprintf("Records: %d\n", dockerWorkers*dockerRecords)) {
		j.t.Fatalf("valsort of the output:\n%s", report)
	}
}

// TestDockerMultiHost runs the distributed sort on a master and three
// workers in separate containers on a private Docker network, and hurts one
// worker in each scenario the way a real cluster does.
func TestDockerMultiHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Docker containers; skipped with -short")
	}
	c := newCluster(t)
	// The scenarios run in parallel (each has its own addresses and
	// containers): most of their time is waiting on outages, timeouts and
	// the docker CLI, and the whole test must stay well under 3 minutes.

	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		j := newDockerJob(t, c, 1)
		j.start(nil)
		j.succeed()
	})

	t.Run("worker killed mid-shuffle and restarted", func(t *testing.T) {
		t.Parallel()
		j := newDockerJob(t, c, 2)
		// Worker 1 stops inside the shuffle, having sent part of its data,
		// and is SIGKILLed there; its replacement (same address, same
		// data dir, as a restarted host would be) rejoins the job.
		j.start(map[int][]string{1: {"GANTRY_DSORT_FAULT=shuffle-piece"}})
		w := j.workers[1]
		w.waitLog("fault point shuffle-piece reached", 60*time.Second)
		c.docker("kill", w.name)
		c.docker("rm", w.name)
		w.run()
		j.succeed()
	})

	t.Run("worker paused past the heartbeat timeout", func(t *testing.T) {
		t.Parallel()
		j := newDockerJob(t, c, 3)
		// Worker 2 holds before sorting (its heartbeats go on) until the
		// file /data/release exists, so the job cannot finish before the
		// pause however slow the docker CLI is.
		j.start(map[int][]string{2: {"GANTRY_DSORT_FAULT=Sorting", "GANTRY_DSORT_FAULT_UNTIL=/data/release"}})
		w := j.workers[2]
		w.waitLog("fault point Sorting reached", 60*time.Second)
		c.docker("pause", w.name)
		// The master declares a worker lost after 5 s without a heartbeat;
		// keep it frozen until the master has said so.
		j.master.waitLog("worker lost", 20*time.Second)
		c.docker("unpause", w.name)
		if err := os.WriteFile(filepath.Join(w.dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		j.succeed()
	})

	t.Run("worker cut off the network for 5s", func(t *testing.T) {
		t.Parallel()
		j := newDockerJob(t, c, 4, "--rejoin-timeout", "30s")
		// Worker 0 holds before sorting until released, so the outage falls
		// inside the job however slow the docker CLI is: cut off after the
		// job had ended, a worker cannot hear the end within the master's
		// shutdown grace and rightly exits 1 (a different scenario).
		j.start(map[int][]string{0: {"GANTRY_DSORT_FAULT=Sorting", "GANTRY_DSORT_FAULT_UNTIL=/data/release"}})
		w := j.workers[0]
		w.waitLog("fault point Sorting reached", 60*time.Second)
		c.docker("network", "disconnect", "-f", c.network, w.name)
		time.Sleep(5 * time.Second) // real time: the outage being simulated
		c.docker("network", "connect", "--ip", w.ip, c.network, w.name)
		if err := os.WriteFile(filepath.Join(w.dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		j.succeed()
	})

	t.Run("master killed mid-shuffle and restarted with --state", func(t *testing.T) {
		t.Parallel()
		if !c.masterBind {
			t.Skip("this gantry has no sort master --state")
		}
		j := newDockerJob(t, c, 6, "--state", "/data/master.json")
		j.master.dir = t.TempDir()
		// Worker 1 holds inside the shuffle until released; the master is
		// SIGKILLed meanwhile and a new container (same address, same
		// state file) resumes the job with the running workers.
		w := j.workers[1]
		j.start(map[int][]string{1: {"GANTRY_DSORT_FAULT=shuffle-piece", "GANTRY_DSORT_FAULT_UNTIL=/data/release"}})
		w.waitLog("fault point shuffle-piece reached", 60*time.Second)
		c.docker("kill", j.master.name)
		c.docker("rm", j.master.name)
		j.master.run()
		j.master.waitLog("resuming the job from its state file", 30*time.Second)
		if err := os.WriteFile(filepath.Join(w.dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		j.succeed()
	})

	t.Run("worker cut off past the rejoin timeout", func(t *testing.T) {
		t.Parallel()
		j := newDockerJob(t, c, 5, "--rejoin-timeout", "2s")
		// Worker 0 holds before sorting, so the job cannot finish before it
		// is cut off however slow the docker CLI is.
		j.start(map[int][]string{0: {"GANTRY_DSORT_FAULT=Sorting", "GANTRY_DSORT_FAULT_UNTIL=/data/release"}})
		w := j.workers[0]
		w.waitLog("fault point Sorting reached", 60*time.Second)
		c.docker("network", "disconnect", "-f", c.network, w.name)
		// The master gives up on its own, with the reason and exit code 1.
		code := j.master.wait(30 * time.Second)
		_, e := j.master.logs()
		if code != 1 || !strings.Contains(e, "did not come back (rejoin timeout 2s)") {
			t.Fatalf("master exit %d, want 1 and the rejoin-timeout reason; stderr:\n%s", code, tail(e, 30))
		}
		c.docker("network", "connect", "--ip", w.ip, c.network, w.name)
		if err := os.WriteFile(filepath.Join(w.dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		// Every worker ends too, with a failure status: the others hear of
		// the abort, the cut-off one stops after --master-timeout.
		for _, w := range j.workers {
			if code := w.wait(40 * time.Second); code == 0 {
				_, e := w.logs()
				t.Errorf("%s exited 0 after the job was aborted:\n%s", w.name, tail(e, 20))
			}
		}
	})
}
