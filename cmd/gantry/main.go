// Command gantry runs distributed work: a distributed external sort over
// gRPC, a work-stealing process scheduler and their tools.
//
// main owns the process-wide concerns and nothing else: signals, the slog
// logger, the Prometheus registry and the hard exit deadline. Everything a
// user types is parsed in internal/cli.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/internal/cli"
)

// hardDeadline bounds how long the process may take to drain after the first
// SIGINT/SIGTERM. A second signal exits at once (the default handler is
// restored as soon as the first one arrives).
const hardDeadline = 15 * time.Second

func main() {
	level := new(slog.LevelVar)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done() // only a signal cancels ctx: a normal return calls os.Exit first
		stop()       // restore default handling: a second signal kills the process at once
		time.AfterFunc(hardDeadline, func() {
			fmt.Fprintf(os.Stderr, "gantry: still running %s after the signal; exiting\n", hardDeadline)
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
	})
	os.Exit(code)
}
