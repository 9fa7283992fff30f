package dsort

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWorkerPeakMemoryWithinBudget runs a job of 4 workers of 200 MB each
// with --memory 128MiB as processes and checks every worker's peak RSS
// against the budget: at most 32 MiB over it. Each input is five
// times what the budget can keep, so the workers spill runs, sort
// full chunks, and serve, fetch and merge several runs and pieces at once,
// as in a large job. Before the fix the workers peaked at 166–177 MiB here.
func TestWorkerPeakMemoryWithinBudget(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the peak RSS from /proc")
	}
	const (
		workers = 4
		records = 2_000_000
		budget  = 128 << 20
		slack   = 32 << 20
	)
	if newMemoryPlan(budget, false, workers, runtime.GOMAXPROCS(0), 4, 1, records, 0).keep {
		t.Fatal("the input would be kept in memory: the test must spill")
	}
	j := newJob(t, workers, records)
	peaks := make([]*peakWatch, workers)
	for w := range j.workers {
		peaks[w] = watchPeak(startWorkerWithMemory(j, w, "128MiB"))
	}
	order := j.workerOrder()
	if code := j.master.wait(2 * time.Minute); code != 0 {
		t.Fatalf("master exited %d:\n%s", code, j.master.tail(20))
	}
	for w, ws := range j.workers {
		if code := ws.proc.wait(30 * time.Second); code != 0 {
			t.Fatalf("worker %d exited %d", w, code)
		}
		peak := peaks[w].peak()
		t.Logf("worker %d: peak RSS %.1f MiB (budget %d MiB)", w, float64(peak)/(1<<20), budget>>20)
		if peak > budget+slack {
			t.Errorf("worker %d: peak RSS %.1f MiB, more than 32 MiB over its budget of %d MiB",
				w, float64(peak)/(1<<20), budget>>20)
		}
	}
	j.validate(order)
}

// startWorkerWithMemory is job.startWorker with the memory budget mem.
func startWorkerWithMemory(j *job, w int, mem string) *proc {
	ws := j.workers[w]
	args := append([]string{"sort", "worker", j.addr, "-I"}, ws.inputs...)
	args = append(args, "-O", ws.out, "--tmp", ws.tmp, "--memory", mem, "--bind", ws.bind, "--master-timeout", "3s")
	ws.proc = startProc(j.t, fmt.Sprintf("worker %d (%s)", w, ws.bind), nil, args...)
	return ws.proc
}

// peakWatch follows a process's peak RSS, VmHWM in /proc/PID/status, which
// only grows, until the process exits. The rusage of an exited child
// cannot serve: its ru_maxrss also counts the memory of the test process
// it was started from.
type peakWatch struct {
	done chan struct{} // closed when the process has exited
	max  int64         // bytes; valid after done
}

func watchPeak(p *proc) *peakWatch {
	pw := &peakWatch{done: make(chan struct{})}
	status := fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)
	go func() {
		defer close(pw.done)
		tick := time.NewTicker(20 * time.Millisecond) // poll: the last read is 20 ms before the exit at most
		defer tick.Stop()
		for {
			pw.max = max(pw.max, vmHWM(status))
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
		}
	}()
	return pw
}

// peak waits for the process's exit and returns its peak RSS in bytes.
func (pw *peakWatch) peak() int64 {
	<-pw.done
	return pw.max
}

// vmHWM reads the VmHWM line of a /proc/PID/status file, in bytes; 0 once
// the process is gone.
func vmHWM(status string) int64 {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib << 10
		}
	}
	return 0
}

// limitGoMemory sets the Go runtime's soft limit to the sum of the shares
// it is given, and leaves alone a limit it did not set.
func TestLimitGoMemory(t *testing.T) {
	saved := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		goMemory.limit = 0
		debug.SetMemoryLimit(saved)
	})
	debug.SetMemoryLimit(math.MaxInt64)
	goMemory.limit = 0
	if !limitGoMemory(100<<20) || !limitGoMemory(50<<20) {
		t.Fatal("no limit set")
	}
	if got := debug.SetMemoryLimit(-1); got != 150<<20 {
		t.Fatalf("limit %d, want the sum of the shares, %d", got, 150<<20)
	}
	debug.SetMemoryLimit(1 << 30) // the program's own, after ours
	if limitGoMemory(10 << 20) {
		t.Fatal("a limit set by the program was changed")
	}
	goMemory.limit = 0
	if limitGoMemory(10<<20) || debug.SetMemoryLimit(-1) != 1<<30 {
		t.Fatal("a limit set before any worker (GOMEMLIMIT) was changed")
	}
}
