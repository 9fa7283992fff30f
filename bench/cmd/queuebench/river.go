package main

// River (github.com/riverqueue/river) on Postgres, run the same way as taskq
// and asynq: jobs are inserted untimed, then a fresh client with MaxWorkers =
// -concurrency is timed from Start until its no-op worker has been called for
// the last job; latency is insert → Work of one job at a time into an idle
// client. The bench creates a private database on the -postgres server, runs
// River's migrations in it and drops it at the end.

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverVersion is the River module the bench is built with (bench/go.mod).
const riverVersion = "v0.51.2"

// dbPrefix names the bench's private databases: dbPrefix + pid.
const dbPrefix = "gantry_queuebench_"

// noopArgs is the job kind every River run inserts and works.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

// riverTuning is the River configuration the bench changes from River's
// defaults (zero: keep River's default).
type riverTuning struct {
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
}

func (t riverTuning) String() string {
	d := func(v, def time.Duration) string {
		if v == 0 || v == def {
			return def.String() + " (River's default)"
		}
		return v.String() + " (River's default " + def.String() + ")"
	}
	return fmt.Sprintf("FetchCooldown %s, FetchPollInterval %s",
		d(t.FetchCooldown, river.FetchCooldownDefault), d(t.FetchPollInterval, river.FetchPollIntervalDefault))
}

// riverBench owns the private database and the pool on it.
type riverBench struct {
	adminURL string // the -postgres URL: where the private database is created and dropped
	dbName   string
	pool     *pgxpool.Pool
	version  string // SELECT version() of the server
	logger   *slog.Logger
}

// startRiver creates the private database on the server at adminURL, migrates
// it to River's current schema and opens a pool on it.
func startRiver(ctx context.Context, adminURL string) (*riverBench, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, fmt.Errorf("-postgres: %w", err)
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect %s (bash scripts/services.sh starts Postgres on loopback): %w", u.Redacted(), err)
	}
	defer admin.Close(ctx)
	rb := &riverBench{adminURL: adminURL, dbName: dbPrefix + strconv.Itoa(os.Getpid())}
	if err := admin.QueryRow(ctx, "SELECT version()").Scan(&rb.version); err != nil {
		return nil, err
	}
	sweepStaleDatabases(ctx, admin)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{rb.dbName}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database %s: %w", rb.dbName, err)
	}
	dbURL := *u
	dbURL.Path = "/" + rb.dbName
	cfg, err := pgxpool.ParseConfig(dbURL.String())
	if err != nil {
		rb.drop()
		return nil, err
	}
	// Enough connections for the inserting client, the worker client's fetches,
	// completer, notifier (one held by LISTEN), leader and maintenance.
	cfg.MaxConns = 20
	if rb.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		rb.drop()
		return nil, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(rb.pool), nil)
	if err != nil {
		rb.close()
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		rb.close()
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	// River's default logger writes warnings to stdout; keep them, on stderr.
	rb.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return rb, nil
}

// close closes the pool and drops the private database.
func (rb *riverBench) close() {
	if rb.pool != nil {
		rb.pool.Close()
		rb.pool = nil
	}
	rb.drop()
}

func (rb *riverBench) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, rb.adminURL)
	if err != nil {
		log.Printf("river: drop database %s: %v", rb.dbName, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{rb.dbName}.Sanitize()+" WITH (FORCE)"); err != nil {
		log.Printf("river: drop database %s: %v", rb.dbName, err)
	}
}

var benchDBName = regexp.MustCompile("^" + dbPrefix + `(\d+)$`)

// sweepStaleDatabases drops the private databases of earlier bench processes
// that died before dropping theirs (log.Fatal, a kill). Only names with a pid
// that is not alive on this machine are dropped.
func sweepStaleDatabases(ctx context.Context, admin *pgx.Conn) {
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", dbPrefix+"%")
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		m := benchDBName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if err := syscall.Kill(pid, 0); pid == os.Getpid() || err == nil || err == syscall.EPERM {
			continue // this process, or one that is alive
		}
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err == nil {
			log.Printf("river: dropped stale database %s (pid %d is gone)", name, pid)
		}
	}
}

// isLoopbackURL reports whether the URL's host is a loopback address or a
// Unix socket directory.
func isLoopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "" {
		h = u.Query().Get("host")
	}
	return h == "" || h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1" || strings.HasPrefix(h, "/")
}

// reset empties the jobs table between runs (the FLUSHALL of the Redis runs).
func (rb *riverBench) reset(ctx context.Context) {
	if _, err := rb.pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
		log.Fatalf("river: truncate: %v", err)
	}
}

func (rb *riverBench) config(t riverTuning, workers *river.Workers, conc int) *river.Config {
	cfg := &river.Config{
		FetchCooldown:     t.FetchCooldown,
		FetchPollInterval: t.FetchPollInterval,
		Logger:            rb.logger,
	}
	if workers != nil {
		cfg.Workers = workers
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: conc}}
	}
	return cfg
}

// insertClient is a client without workers (insert only), as a producer
// process would have.
func (rb *riverBench) insertClient(t riverTuning) *river.Client[pgx.Tx] {
	c, err := river.NewClient(riverpgxv5.New(rb.pool), rb.config(t, nil, 0))
	if err != nil {
		log.Fatalf("river: insert client: %v", err)
	}
	return c
}

// throughput inserts n jobs untimed (InsertManyFast, COPY FROM, batches of
// 1000 like taskq's EnqueueBatch), then times a fresh client from Start until
// its no-op worker has been called n times. After the timing, Stop flushes the
// completer and the jobs table must hold n completed jobs.
func (rb *riverBench) throughput(ctx context.Context, n, conc int, t riverTuning) float64 {
	rb.reset(ctx)
	ins := rb.insertClient(t)
	batch := make([]river.InsertManyParams, 0, 1000)
	inserted := 0
	for i := 0; i < n; i++ {
		batch = append(batch, river.InsertManyParams{Args: noopArgs{}})
		if len(batch) == cap(batch) || i == n-1 {
			k, err := ins.InsertManyFast(ctx, batch)
			if err != nil {
				log.Fatalf("river: insert: %v", err)
			}
			inserted += k
			batch = batch[:0]
		}
	}
	if inserted != n {
		log.Fatalf("river: inserted %d jobs, want %d", inserted, n)
	}

	var done atomic.Int64
	finished := make(chan struct{})
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error {
		if done.Add(1) == int64(n) {
			close(finished)
		}
		return nil
	}))
	c, err := river.NewClient(riverpgxv5.New(rb.pool), rb.config(t, workers, conc))
	if err != nil {
		log.Fatalf("river: client: %v", err)
	}
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		log.Fatalf("river: start: %v", err)
	}
	<-finished
	el := time.Since(start)
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		log.Fatalf("river: stop: %v", err)
	}
	var completed int64
	if err := rb.pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&completed); err != nil {
		log.Fatalf("river: count: %v", err)
	}
	if completed != int64(n) || done.Load() != int64(n) {
		log.Fatalf("river: %d jobs worked, %d completed, want %d", done.Load(), completed, n)
	}
	return float64(n) / el.Seconds()
}

// latency inserts one job at a time (Insert, from an insert-only client) into
// an idle client with MaxWorkers 10 and times insert → Work, 2 ms apart, as
// taskqLatency and asynqLatency do.
func (rb *riverBench) latency(ctx context.Context, samples int, t riverTuning) (time.Duration, time.Duration) {
	rb.reset(ctx)
	ins := rb.insertClient(t)
	started := make(chan time.Time, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error {
		started <- time.Now()
		return nil
	}))
	c, err := river.NewClient(riverpgxv5.New(rb.pool), rb.config(t, workers, 10))
	if err != nil {
		log.Fatalf("river: client: %v", err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatalf("river: start: %v", err)
	}
	time.Sleep(time.Second) // let the client go idle (LISTEN set up, first fetches done)
	lat := make([]time.Duration, 0, samples)
	for range samples {
		t0 := time.Now()
		if _, err := ins.Insert(ctx, noopArgs{}, nil); err != nil {
			log.Fatalf("river: insert: %v", err)
		}
		lat = append(lat, (<-started).Sub(t0))
		time.Sleep(2 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		log.Fatalf("river: stop: %v", err)
	}
	return percentiles(lat)
}
