// Command queuebench runs taskq and asynq side by side on one private
// redis-server (started on a free loopback port, no persistence unless
// -aof), and River
// (riverqueue/river on Postgres) in a private database it creates on the
// -postgres server: the same no-op handler, the same concurrency, the same
// number of tasks, in every run. It prints tasks/s of each and the ratios,
// then the enqueue→start latency of a task enqueued into an idle worker
// (p50/p99), and, with -clients, a rueidis vs go-redis comparison of the
// dequeue-shaped script call. It prints redis-benchmark's figures on the
// same server first: the ceiling the queues run under. With -gantry, taskq
// runs as the CLI's `queue worker` process, timed from its start to the
// queue drained.
//
//	go run ./cmd/queuebench -tasks 100000 -concurrency 10 -runs 3
//	go run ./cmd/queuebench -river=false   # taskq and asynq only, no Postgres
//	go run ./cmd/queuebench -memory       # Redis bytes per pending task, taskq vs asynq
//	go run ./cmd/queuebench -river=false -aof -concurrency 16 -gantry /tmp/gantry  # the CLI worker, AOF on
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/riverqueue/river"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq"
)

func main() {
	tasks := flag.Int("tasks", 100_000, "tasks per throughput run")
	conc := flag.Int("concurrency", 10, "handler concurrency of every worker")
	runs := flag.Int("runs", 3, "throughput runs of each (medians reported)")
	samples := flag.Int("latency-samples", 1000, "enqueue→start samples for taskq")
	asynqSamples := flag.Int("asynq-latency-samples", 20, "enqueue→start samples for asynq (it sleeps up to 1s when idle)")
	chain := flag.Int("chain", 10, "also run -tasks noop tasks as chains of this many workflow nodes (taskq only: River's workflows are in its paid tier, asynq has none); 0 skips")
	clients := flag.Bool("clients", false, "also compare rueidis and go-redis on the dequeue-shaped script")
	pgDefault := os.Getenv("GANTRY_TEST_POSTGRES")
	if pgDefault == "" {
		pgDefault = testutil.DefaultPostgres
	}
	withRiver := flag.Bool("river", true, "also run River (Postgres) in every run")
	pgURL := flag.String("postgres", pgDefault, "Postgres server for River, $GANTRY_TEST_POSTGRES if set; the bench creates and drops its own database there")
	riverSamples := flag.Int("river-latency-samples", 200, "enqueue→start samples for River")
	riverDefaultSamples := flag.Int("river-default-latency-samples", 20, "enqueue→start samples for River with all its fetch defaults (0: skip)")
	// River's FetchCooldown (default 100ms) is, per its documentation, the
	// limit on throughput: a client fetches at most once per cooldown and at
	// most its free MaxWorkers slots per fetch, so with MaxWorkers 10 the
	// default caps a backlog at 100 jobs/s (measured: 100). The bench gives
	// River the least cooldown it accepts (1ms; River's own "river bench" sets
	// 2ms, which measured ~25% slower here at MaxWorkers 10) and the poll
	// interval "river bench" sets (20ms, a fallback to LISTEN/NOTIFY).
	riverCooldown := flag.Duration("river-fetch-cooldown", river.FetchCooldownMin, "River Config.FetchCooldown: River's default is 100ms, its own \"river bench\" sets 2ms, 1ms is the least River accepts")
	memory := flag.Bool("memory", false, "only compare Redis memory: -tasks pending no-op tasks of taskq and of asynq (FLUSHALL before each), -runs times; no River, no throughput")
	riverPoll := flag.Duration("river-fetch-poll-interval", 20*time.Millisecond, "River Config.FetchPollInterval: River's default is 1s, its own \"river bench\" sets 20ms")
	aof := flag.Bool("aof", false, "run redis-server with AOF on (appendonly yes, appendfsync everysec), as production runs it")
	gantryBin := flag.String("gantry", "", "time taskq as this gantry binary's `queue worker` process (start to drained) instead of a worker in this process")
	gantryB := flag.String("gantry-b", "", "with -gantry: an A/B comparison of the two binaries' CLI workers in -runs interleaved pairs (no asynq, no River)")
	gantryFlags := flag.String("gantry-flags", "", "more flags for -gantry's queue worker, space-separated (e.g. --cpuprofile /tmp/worker.prof)")
	flag.Parse()
	tuning := riverTuning{FetchCooldown: *riverCooldown, FetchPollInterval: *riverPoll}
	if *gantryB != "" {
		if *gantryBin == "" {
			log.Fatal("-gantry-b needs -gantry (the A binary)")
		}
		*withRiver, *clients = false, false // the A/B mode times the two binaries only
	}

	srv := startRedis(*aof)
	cleanups = append(cleanups, srv.stop)
	defer runCleanups()
	go func() { // Ctrl-C: stop redis-server and drop River's database before exiting
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		runCleanups()
		os.Exit(130)
	}()
	addr := srv.addr
	persistence := "no persistence"
	if *aof {
		persistence = "AOF on, appendfsync everysec"
	}
	fmt.Printf("redis-server on %s (private, %s); %d tasks, concurrency %d, %d runs\n", addr, persistence, *tasks, *conc, *runs)

	if *memory {
		memoryBench(addr, *tasks, *runs)
		return
	}
	ctx := context.Background()
	var rb *riverBench
	if *withRiver {
		if !isLoopbackURL(*pgURL) {
			log.Printf("warning: -postgres is not on loopback; River's figures include the network")
		}
		var err error
		if rb, err = startRiver(ctx, *pgURL); err != nil {
			runCleanups()
			log.Fatalf("river: %v (-river=false skips River)", err)
		}
		cleanups = append(cleanups, rb.close)
		fmt.Printf("River %s (riverpgxv5) in private database %s on %s\n  %s\n", riverVersion, rb.dbName, hostOf(*pgURL), rb.version)
		fmt.Printf("  River config: %s; queue %q MaxWorkers %d; everything else River's defaults\n", tuning, river.QueueDefault, *conc)
	}

	if *clients {
		clientBench(addr)
	}
	fmt.Printf("CEILING redis-benchmark (50 clients, no pipelining): %s\n", ceiling(addr))
	flush(addr)
	if *gantryBin != "" && *gantryB != "" {
		abRuns(addr, *gantryBin, *gantryB, strings.Fields(*gantryFlags), *tasks, *conc, *runs)
		return
	}
	runTaskq := func() float64 { return taskqThroughput(addr, *tasks, *conc) }
	if *gantryBin != "" {
		fmt.Printf("taskq: %s queue worker --concurrency %d (a process, timed from its start to the queue drained)\n", *gantryBin, *conc)
		runTaskq = func() float64 {
			return taskqCLIThroughput("taskq", addr, *gantryBin, strings.Fields(*gantryFlags), *tasks, *conc)
		}
	}
	var tq, aq, rq, cq []float64
	for i := range *runs {
		if *chain > 0 {
			cq = append(cq, taskqChainThroughput(addr, *tasks, *conc, *chain))
			flush(addr)
		}
		a := asynqThroughput(addr, *tasks, *conc)
		flush(addr)
		t := runTaskq()
		flush(addr)
		tq, aq = append(tq, t), append(aq, a)
		if rb == nil {
			fmt.Printf("run %d: taskq %8.0f tasks/s   asynq %8.0f tasks/s   ratio %.2fx\n", i+1, t, a, t/a)
			continue
		}
		r := rb.throughput(ctx, *tasks, *conc, tuning)
		rq = append(rq, r)
		fmt.Printf("run %d: taskq %8.0f tasks/s   asynq %8.0f tasks/s   river %8.0f tasks/s   ratio taskq/asynq %.2fx   taskq/river %.2fx\n", i+1, t, a, r, t/a, t/r)
	}
	mt, ma := median(tq), median(aq)
	fmt.Printf("REDIS CPU per task while draining (median): taskq %.1f µs, asynq %.1f µs\n", median(drainCPU["taskq"]), median(drainCPU["asynq"]))
	if len(cq) > 0 {
		fmt.Printf("WORKFLOW median: taskq chains of %d: %.0f nodes/s, plain tasks %.0f tasks/s in the same runs (%.2fx); per run: %.0f\n",
			*chain, median(cq), mt, median(cq)/mt, cq)
	}
	if rb == nil {
		fmt.Printf("THROUGHPUT median: taskq %.0f tasks/s, asynq %.0f tasks/s, ratio %.2fx\n", mt, ma, mt/ma)
	} else {
		mr := median(rq)
		fmt.Printf("THROUGHPUT median: taskq %.0f tasks/s, asynq %.0f tasks/s, river %.0f tasks/s, ratio taskq/asynq %.2fx, taskq/river %.2fx\n", mt, ma, mr, mt/ma, mt/mr)
	}

	if *samples > 0 {
		p50, p99 := taskqLatency(addr, *samples)
		fmt.Printf("LATENCY taskq enqueue→start into an idle worker (%d samples): p50 %s p99 %s\n", *samples, p50, p99)
	}
	flush(addr)
	if *asynqSamples > 0 {
		a50, a99 := asynqLatency(addr, *asynqSamples)
		fmt.Printf("LATENCY asynq enqueue→start into an idle worker (%d samples): p50 %s p99 %s\n", *asynqSamples, a50, a99)
	}
	if rb != nil && *riverSamples > 0 {
		r50, r99 := rb.latency(ctx, *riverSamples, tuning)
		fmt.Printf("LATENCY river enqueue→start into an idle worker (%d samples): p50 %s p99 %s [%s]\n", *riverSamples, r50, r99, tuning)
	}
	if rb != nil && *riverDefaultSamples > 0 {
		r50, r99 := rb.latency(ctx, *riverDefaultSamples, riverTuning{})
		fmt.Printf("LATENCY river-defaults enqueue→start into an idle worker (%d samples): p50 %s p99 %s [%s]\n", *riverDefaultSamples, r50, r99, riverTuning{})
	}
}

// cleanups stop the redis-server and drop River's database, newest first,
// once: at the end of main or on SIGINT/SIGTERM.
var (
	cleanups    []func()
	cleanupOnce sync.Once
)

func runCleanups() {
	cleanupOnce.Do(func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	})
}

func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return "(default host)"
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

type redisProc struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

func startRedis(aof bool) *redisProc {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, _ := os.MkdirTemp("", "queuebench-")
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	if aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, _ = os.Create(filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		log.Fatalf("start redis-server (apt-get install redis-server): %v", err)
	}
	a := "127.0.0.1:" + strconv.Itoa(port)
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", a); err == nil {
			c.Close()
			break
		}
		if i > 200 {
			log.Fatal("redis-server did not start")
		}
		time.Sleep(25 * time.Millisecond)
	}
	return &redisProc{addr: a, cmd: cmd, dir: dir}
}

func (r *redisProc) stop() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
	os.RemoveAll(r.dir)
}

func flush(addr string) {
	if out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", portOf(addr), "FLUSHALL").CombinedOutput(); err != nil {
		log.Fatalf("flushall: %v %s", err, out)
	}
}

func portOf(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

func taskqThroughput(addr string, n, conc int) float64 {
	ctx := context.Background()
	c := newClient(addr)
	defer c.Close()
	enqueueNoops(ctx, c, n)
	defer cpuMeter("taskq", addr, n)()
	return taskqRun(ctx, addr, conc, int64(n))
}

// taskqRun runs a worker of conc noop handlers on the tasks enqueued at
// addr until total have run: tasks per second, from the worker's start to
// the last handler's return.
func taskqRun(ctx context.Context, addr string, conc int, total int64) float64 {
	w, err := taskq.NewWorker(taskq.WorkerConfig{Redis: addr, Concurrency: conc, DisableSteal: true})
	if err != nil {
		log.Fatal(err)
	}
	var done atomic.Int64
	finished := make(chan struct{})
	w.Handle("noop", func(context.Context, *taskq.Task) error {
		if done.Add(1) == total {
			close(finished)
		}
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	start := time.Now()
	runDone := make(chan struct{})
	go func() { w.Run(rctx); close(runDone) }()
	<-finished
	el := time.Since(start)
	cancel()
	<-runDone
	return float64(total) / el.Seconds()
}

// taskqChainThroughput runs n noop tasks as n/length chains of length
// (taskq.Chain, enqueued untimed): nodes per second, the first start to
// the last end, each node released by its parent's ack.
func taskqChainThroughput(addr string, n, conc, length int) float64 {
	ctx := context.Background()
	c := newClient(addr)
	defer c.Close()
	chains := n / length
	steps := make([]*taskq.Task, length)
	for i := range steps {
		steps[i] = taskq.NewTask("noop", nil)
	}
	for range chains {
		if _, err := c.EnqueueWorkflow(ctx, taskq.Chain(steps...)); err != nil {
			log.Fatal(err)
		}
	}
	return taskqRun(ctx, addr, conc, int64(chains*length))
}

func asynqThroughput(addr string, n, conc int) float64 {
	opt := asynq.RedisClientOpt{Addr: addr}
	c := asynq.NewClient(opt)
	defer c.Close()
	var wg sync.WaitGroup
	per := n / 8
	for g := range 8 {
		cnt := per
		if g == 7 {
			cnt = n - 7*per
		}
		wg.Go(func() {
			for range cnt {
				if _, err := c.Enqueue(asynq.NewTask("noop", nil)); err != nil {
					log.Fatal(err)
				}
			}
		})
	}
	wg.Wait()
	defer cpuMeter("asynq", addr, n)()
	var done atomic.Int64
	finished := make(chan struct{})
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: conc, LogLevel: asynq.FatalLevel})
	start := time.Now()
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if done.Add(1) == int64(n) {
			close(finished)
		}
		return nil
	})); err != nil {
		log.Fatal(err)
	}
	<-finished
	el := time.Since(start)
	srv.Shutdown()
	return float64(n) / el.Seconds()
}

func percentiles(d []time.Duration) (time.Duration, time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2].Round(time.Microsecond), d[(len(d)*99)/100].Round(time.Microsecond)
}

func taskqLatency(addr string, samples int) (time.Duration, time.Duration) {
	ctx := context.Background()
	c := newClient(addr)
	defer c.Close()
	w, err := taskq.NewWorker(taskq.WorkerConfig{Redis: addr, Concurrency: 10, DisableSteal: true})
	if err != nil {
		log.Fatal(err)
	}
	started := make(chan time.Time, 1)
	w.Handle("noop", func(context.Context, *taskq.Task) error { started <- time.Now(); return nil })
	rctx, cancel := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { w.Run(rctx); close(runDone) }()
	time.Sleep(300 * time.Millisecond) // let the worker go idle (blocked on its wake-up list)
	lat := make([]time.Duration, 0, samples)
	for range samples {
		t0 := time.Now()
		if _, err := c.Enqueue(ctx, taskq.NewTask("noop", nil)); err != nil {
			log.Fatal(err)
		}
		lat = append(lat, (<-started).Sub(t0))
		time.Sleep(2 * time.Millisecond) // idle again before the next
	}
	cancel()
	<-runDone
	return percentiles(lat)
}

func asynqLatency(addr string, samples int) (time.Duration, time.Duration) {
	opt := asynq.RedisClientOpt{Addr: addr}
	c := asynq.NewClient(opt)
	defer c.Close()
	started := make(chan time.Time, 1)
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 10, LogLevel: asynq.FatalLevel})
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { started <- time.Now(); return nil })); err != nil {
		log.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	lat := make([]time.Duration, 0, samples)
	for range samples {
		t0 := time.Now()
		if _, err := c.Enqueue(asynq.NewTask("noop", nil)); err != nil {
			log.Fatal(err)
		}
		lat = append(lat, (<-started).Sub(t0))
		time.Sleep(2 * time.Millisecond)
	}
	srv.Shutdown()
	return percentiles(lat)
}
