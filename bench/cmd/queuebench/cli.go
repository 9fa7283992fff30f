package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/taskq"
)

// taskqCLIThroughput enqueues n no-op tasks, then times what a user of the
// CLI worker waits for: from starting `bin queue worker --concurrency conc`
// to the last task completed (polled through Client.Stats every 5 ms), the
// process then stopped with SIGTERM. flags go after the worker's own.
// The drain's Redis CPU is recorded under system (drainCPU).
func taskqCLIThroughput(system, addr, bin string, flags []string, n, conc int) float64 {
	ctx := context.Background()
	c := newClient(addr)
	defer c.Close()
	enqueueNoops(ctx, c, n)
	before := completed(ctx, c)
	cmd := exec.Command(bin, "queue", "worker", "--redis", addr, "--queues", taskq.DefaultQueue,
		"--concurrency", strconv.Itoa(conc), "--no-cron", "--no-steal")
	cmd.Args = append(cmd.Args, flags...)
	cmd.Stderr = os.Stderr
	defer cpuMeter(system, addr, n)()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		log.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for completed(ctx, c)-before < int64(n) {
		select {
		case err := <-exited:
			log.Fatalf("%s queue worker exited before the queue drained: %v", bin, err)
		case <-tick.C:
		}
	}
	el := time.Since(start)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		log.Printf("%s queue worker: %v", bin, err)
	}
	return float64(n) / el.Seconds()
}

// newClient is a taskq client of the server at addr (it exits on error).
func newClient(addr string) *taskq.Client {
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: addr})
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// completed is the default queue's count of completed tasks, ever.
func completed(ctx context.Context, c *taskq.Client) int64 {
	s, err := c.Stats(ctx)
	if err != nil {
		log.Fatal(err)
	}
	return s.Queues[taskq.DefaultQueue].Completed
}

// enqueueNoops enqueues n no-op tasks into the default queue, 1,000 a call.
func enqueueNoops(ctx context.Context, c *taskq.Client, n int) {
	batch := make([]*taskq.Task, 0, 1000)
	for i := range n {
		batch = append(batch, taskq.NewTask("noop", nil))
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := c.EnqueueBatch(ctx, batch); err != nil {
				log.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// ceiling runs redis-benchmark against the private server (50 clients, no
// pipelining: the round-trip-bound ceiling a queue lives under) and
// returns its one-line summaries of SET and GET.
func ceiling(addr string) string {
	out, err := exec.Command("redis-benchmark", "-h", "127.0.0.1", "-p", portOf(addr), "-q", "-n", "200000", "-t", "set,get").Output()
	if err != nil {
		return fmt.Sprintf("redis-benchmark: %v", err)
	}
	var lines []string
	for l := range strings.Lines(string(out)) {
		// -q prints progress lines ending in \r before each summary.
		if i := strings.LastIndexByte(l, '\r'); i >= 0 {
			l = l[i+1:]
		}
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}

// redisCPU is the redis-server's CPU time so far (used_cpu_user +
// used_cpu_sys of INFO cpu), in seconds.
func redisCPU(addr string) float64 {
	out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", portOf(addr), "INFO", "cpu").Output()
	if err != nil {
		log.Fatalf("redis-cli INFO cpu: %v", err)
	}
	total := 0.0
	for l := range strings.Lines(string(out)) {
		l = strings.TrimSpace(l)
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(l, k); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					log.Fatalf("INFO cpu %s: %v", l, err)
				}
				total += f
			}
		}
	}
	return total
}

// drainCPU records, per system, the Redis CPU microseconds per task of
// each run's drain (enqueues not counted): where a queue's ceiling is.
var drainCPU = map[string][]float64{}

// cpuMeter measures one drain's Redis CPU: call it before the drain and
// the returned func after it.
func cpuMeter(system, addr string, n int) func() {
	before := redisCPU(addr)
	return func() {
		drainCPU[system] = append(drainCPU[system], (redisCPU(addr)-before)*1e6/float64(n))
	}
}

// abRuns times two gantry binaries' CLI workers in interleaved runs on the
// same Redis (A, B, B, A, A, B, …: neither always goes first after a
// flush), for a change too small to stand out of this machine's run-to-run
// swing in separate runs; it prints each pair and the medians.
func abRuns(addr, binA, binB string, flags []string, n, conc, runs int) {
	runs = max(runs, 1)
	fmt.Printf("A/B: A %s, B %s; queue worker --concurrency %d, %d pairs\n", binA, binB, conc, runs)
	var a, b []float64
	for i := range runs {
		order := []string{"A", "B"}
		if i%2 == 1 {
			order = []string{"B", "A"}
		}
		for _, which := range order {
			bin, res := binA, &a
			if which == "B" {
				bin, res = binB, &b
			}
			*res = append(*res, taskqCLIThroughput(which, addr, bin, flags, n, conc))
			flush(addr)
		}
		fmt.Printf("pair %d: A %8.0f tasks/s   B %8.0f tasks/s   B/A %.3f\n", i+1, a[i], b[i], b[i]/a[i])
	}
	ratios := make([]float64, len(a))
	for i := range a {
		ratios[i] = b[i] / a[i]
	}
	fmt.Printf("A/B median: A %.0f tasks/s (Redis %.1f µs/task), B %.0f tasks/s (Redis %.1f µs/task), B/A of the medians %.3f, median of the pairs' B/A %.3f\n",
		median(a), median(drainCPU["A"]), median(b), median(drainCPU["B"]), median(b)/median(a), median(ratios))
}
