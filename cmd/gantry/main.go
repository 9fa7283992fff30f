// Command gantry runs distributed work. It holds four subsystems and their
// tools:
//
//   - sort/dsort: `gantry sort local` sorts gensort records on one machine
//     (extsort); `gantry sort master|worker|status` sorts them over many
//     machines, over gRPC (dsort); gensort and valsort make and check them
//     (record).
//   - sched: a work-stealing scheduler of message-driven processes;
//     `gantry sched bench` measures it against goroutines and channels.
//   - queue/taskq: a multi-tenant task queue on Redis; `gantry queue worker`
//     runs tasks, enqueue, stats, dlq and health operate on it.
//   - ws/workspace: workspaces reconciled to their desired state (process or
//     Docker containers, archives on a file system or S3); `gantry ws serve`
//     runs the server, the other ws commands are its client.
//
// main owns the process-wide concerns and nothing else: signals, the slog
// logger, the Prometheus registry and the hard exit deadline. Everything a
// user types is parsed in cmd/gantry/internal/cli.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/cmd/gantry/internal/cli"
)

// hardDeadline bounds how long the process may take to drain after the first
// SIGINT/SIGTERM, unless the command asked for longer (Env.ShutdownGrace: a
// worker's --shutdown-timeout). A second signal exits at once (the default
// handler is restored as soon as the first one arrives).
const hardDeadline = 15 * time.Second

func main() {
	level := new(slog.LevelVar)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var deadline atomic.Int64 // the hard deadline, ns: hardDeadline or what the command asked
	deadline.Store(int64(hardDeadline))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done() // only a signal cancels ctx: a normal return calls os.Exit first
		stop()       // restore default handling: a second signal kills the process at once
		d := time.Duration(deadline.Load())
		time.AfterFunc(d, func() {
			fmt.Fprintf(os.Stderr, "gantry: still running %s after the signal; exiting\n", d)
			os.Exit(3)
		})
	}()

	code := cli.Execute(ctx, cli.Env{
		Args:     os.Args[1:],
		Stdout:   os.Stdout,
		Stderr:   os.Stderr,
		Logger:   logger,
		LogLevel: level,
		Registry: prometheus.NewRegistry(),
		ShutdownGrace: func(d time.Duration) {
			for {
				cur := deadline.Load()
				if int64(d) <= cur || deadline.CompareAndSwap(cur, int64(d)) {
					return
				}
			}
		},
	})
	os.Exit(code)
}
