// Command startbench measures how long a user waits for a workspace to
// start, end to end, on a real `gantry ws serve` on loopback (a private
// temporary data directory; SQLite, or a private Postgres database with
// -db), driven through the client library (workspace/client) with a
// user's token:
//
//   - create → RUNNING: from sending POST /v1/workspaces (desired
//     RUNNING) to the workspace seen observed RUNNING with no operation in
//     flight (what `ws wait ID RUNNING` waits for), by the server's event
//     stream (GET /events) or a Get every -poll, whichever first;
//   - create → exec: from the same POST to `ws exec ID -- true` returning
//     exit status 0 (client.Exec): exec is sent right after the create,
//     again every -exec-retry while the server refuses it (409, not
//     RUNNING yet), and at once when the workspace is seen RUNNING.
//
// Modes: cold (a plain create with a command: volume, then start) and warm
// (a create from a template whose warm pool, -pool members, is full
// before each start, so the start claims a ready member; a start the pool
// did not serve, "pooled" false, counts as a cold miss). Each measured
// workspace is deleted, and gone, before the next start; under the
// converge load, so that every start falls within the convergence, the
// starts begin -pace apart instead, a warm one waits only for a ready
// member, and the deletes run beside them.
//
// Providers: process (ws serve's default), docker (an image built here
// FROM scratch with the host's sh, sleep and true: no registry) and
// kubernetes (the simulated cluster `scripts/services.sh kubernetes`
// starts: kwok nodes run no container, so only create → RUNNING is
// measured there). Loads: idle, and (process provider) bulk: -bulk
// workspaces created desired STANDBY through the API (no batch endpoint:
// -bulk-workers creates at a time, as fast as the server takes them; the
// server provisions a volume for each) while the starts are measured,
// which begin once 1,000 are in; the row tells how far the bulk had got
// (created, observed STANDBY) when the measurement ended. Each row runs on
// a fresh server.
//
// It prints, per (provider, mode, load), p50/p90/p99/max of -n starts as
// a markdown table, and the load average (the machine's other work shows
// in the figures: run it on a quiet machine).
//
//	go run ./cmd/startbench                      # everything (make bench-ws-start)
//	go run ./cmd/startbench -providers process -modes cold -loads idle -n 200
//	go run ./cmd/startbench -providers docker -modes cold -loads idle -n 50
//	go run ./cmd/startbench -providers process -loads bulk -bulk 100000
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type config struct {
	providers, modes, loads []string
	n, bulk, pool           int
	bulkWorkers             int
	timeout, execRetry      time.Duration
	pace                    time.Duration
	poll                    time.Duration
	repo, gantry, db        string
	kubeconfig, cpuprofile  string
	keep, verbose           bool
}

func main() {
	var c config
	var providers, modes, loads string
	flag.StringVar(&providers, "providers", "process,docker,kubernetes", "providers, comma-separated: process, docker, kubernetes")
	flag.StringVar(&modes, "modes", "cold,warm", "modes, comma-separated: cold (a plain create), warm (from a template's warm pool)")
	flag.StringVar(&loads, "loads", "idle,bulk", "loads, comma-separated: idle, bulk (-bulk creates through the API meanwhile), converge (-bulk workspaces written into the database before the server starts, converging while the starts run); bulk and converge: process provider only")
	flag.IntVar(&c.n, "n", 200, "measured starts per (provider, mode, load)")
	flag.IntVar(&c.bulk, "bulk", 100000, "workspaces the bulk load creates (desired STANDBY)")
	flag.IntVar(&c.bulkWorkers, "bulk-workers", 16, "concurrent creates of the bulk load")
	flag.IntVar(&c.pool, "pool", 10, "warm pool size")
	flag.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up on one start after this long")
	flag.DurationVar(&c.pace, "pace", 50*time.Millisecond, "under the converge load, one start begins this long after the previous began (so that all -n fall within the convergence)")
	flag.DurationVar(&c.execRetry, "exec-retry", 50*time.Millisecond, "a cold start's exec is tried again at least this often (and on each event of the workspace)")
	flag.DurationVar(&c.poll, "poll", 10*time.Millisecond, "besides the event stream, a start Gets its workspace this often until it is RUNNING")
	flag.StringVar(&c.repo, "repo", "..", "the gantry repository to build cmd/gantry from")
	flag.StringVar(&c.gantry, "gantry", "", "a gantry binary to run instead of building one (docker: it must be static)")
	flag.StringVar(&c.db, "db", "", "Postgres server (postgres://…, as GANTRY_TEST_POSTGRES): each server gets a private database there; default SQLite in the data directory")
	flag.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: the simulated one of scripts/services.sh kubernetes, started if nothing answers)")
	flag.StringVar(&c.cpuprofile, "cpuprofile", "", "write each server's CPU profile (ws serve --cpuprofile) into this directory, as PROVIDER-MODE-LOAD.pprof (go tool pprof BIN FILE)")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directories")
	flag.BoolVar(&c.verbose, "v", false, "log every start")
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	c.providers, c.modes, c.loads = split(providers), split(modes), split(loads)
	if err := c.check(); err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := newBench(ctx, c)
	if err != nil {
		log.Fatal(err)
	}
	code := b.run(ctx)
	b.close()
	os.Exit(code)
}

func (c config) check() error {
	for _, p := range c.providers {
		if p != "process" && p != "docker" && p != "kubernetes" {
			return fmt.Errorf("-providers: %q: want process, docker or kubernetes", p)
		}
	}
	for _, m := range c.modes {
		if m != "cold" && m != "warm" {
			return fmt.Errorf("-modes: %q: want cold or warm", m)
		}
	}
	for _, l := range c.loads {
		if l != "idle" && l != "bulk" && l != "converge" {
			return fmt.Errorf("-loads: %q: want idle, bulk or converge", l)
		}
	}
	if c.n < 1 || c.pool < 1 || c.bulk < 1 || c.bulkWorkers < 1 {
		return fmt.Errorf("-n, -pool, -bulk and -bulk-workers must be positive")
	}
	return nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// run measures every (provider, mode, load) asked for, each on a fresh
// server, and prints the table; its exit code is 1 when a row failed.
func (b *bench) run(ctx context.Context) int {
	var rows []row
	failed := false
	for _, p := range b.cfg.providers {
		for _, m := range b.cfg.modes {
			for _, l := range b.cfg.loads {
				if (l == "bulk" || l == "converge") && p != "process" {
					continue // the bulk load is the process provider's (volumes on this host)
				}
				if ctx.Err() != nil {
					break
				}
				fmt.Printf("\n== %s, %s, %s: load %s\n", p, m, l, loadavg())
				r, err := b.measureRow(ctx, p, m, l)
				if err != nil {
					log.Printf("%s %s %s: %v", p, m, l, err)
					failed = true
				}
				if r.running.n() > 0 || r.exec.n() > 0 {
					r.print()
					rows = append(rows, r)
				}
			}
		}
	}
	db := "SQLite (each server's own, in its data directory)"
	if b.cfg.db != "" {
		db = "Postgres (a private database of each server's on -db's server)"
	}
	fmt.Printf("\nws serve database: %s\n\n", db)
	printTable(os.Stdout, rows)
	fmt.Printf("\nload average at the end (1, 5, 15 min): %s; %d cores\n", loadavg(), numCPU())
	if failed {
		return 1
	}
	return 0
}
