package cli

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/sched/schedbench"
)

func newSchedCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sched",
		Short: "Work-stealing process scheduler tools",
	}
	cmd.AddCommand(newSchedBenchCmd(env))
	return cmd
}

func newSchedBenchCmd(env *Env) *cobra.Command {
	var o schedbench.Options // the flags: --scale, --runs, --idle
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the scheduler against goroutines + channels on this machine",
		Long: `Runs the scheduler's benchmark workloads (ping-pong, spawn-to-done, fan-out 1→1000,
yield→CompleteYield, fork-join fib(25) with children spawned inside Step, allocations per
message, idle CPU) on 1 and 2 workers next to the
goroutines-and-channels program a Go programmer would write instead, and prints the
medians as a table. The default run takes about a minute on 2 cores.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSchedBench(cmd.Context(), env, o)
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.Float64Var(&o.Scale, "scale", 1, "multiply every workload's size by `F` (0.1 for a quick look)")
	f.IntVar(&o.Runs, "runs", 3, "runs per figure; the median is printed")
	f.DurationVar(&o.Idle, "idle", 5*time.Second, "measure idle CPU over this window (0 skips)")
	return cmd
}

// The bounds of sched bench's flags: a larger scale overflows the
// workloads' operation counts; a shorter idle window measures the clock.
const (
	maxSchedScale = 10_000
	minSchedIdle  = 100 * time.Millisecond
)

// runSchedBench is `gantry sched bench`: run the workloads of o and print
// the table on stdout, progress on stderr.
func runSchedBench(ctx context.Context, env *Env, o schedbench.Options) error {
	if !(o.Scale > 0 && o.Scale <= maxSchedScale) { // NaN too
		return fmt.Errorf("--scale %v: want a positive factor such as 0.1 or 2, at most %d", o.Scale, maxSchedScale)
	}
	if o.Runs < 1 {
		return fmt.Errorf("--runs %d: want 1 or more", o.Runs)
	}
	if o.Idle < 0 || o.Idle > 0 && o.Idle < minSchedIdle {
		return fmt.Errorf("--idle %v: want a duration of at least %v such as 5s (a shorter window measures the clock, not the workers), or 0 to skip", o.Idle, minSchedIdle)
	}
	fmt.Fprintf(env.Stderr, "sched bench: GOMAXPROCS=%d, %d CPUs, %s; medians of %d runs\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version(), o.Runs)
	start := time.Now()
	rows, err := schedbench.Run(ctx, o, func(row string) {
		fmt.Fprintf(env.Stderr, "sched bench: %s…\n", row)
	})
	printSchedRows(env, rows)
	if err == nil {
		err = ctx.Err() // interrupted in the last row: its figures are not whole
	}
	if err != nil {
		return fmt.Errorf("sched bench: %w", err)
	}
	fmt.Fprintf(env.Stderr, "sched bench: done in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// printSchedRows prints the rows as a table on stdout.
func printSchedRows(env *Env, rows []schedbench.Row) {
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tunit\tsched 1 worker\tsched 2 workers\tgoroutines+channels\tgoal\tmet")
	num := func(v float64) string {
		switch {
		case v == 0:
			return "-"
		case v < 10:
			return strconv.FormatFloat(v, 'f', 3, 64)
		default:
			return strconv.FormatFloat(v, 'f', 0, 64)
		}
	}
	for _, r := range rows {
		met := "no"
		switch {
		case !r.Judged:
			met = "-"
		case r.Met:
			met = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Unit, num(r.Sched1), num(r.Sched2), num(r.Baseline), r.Goal, met)
	}
	tw.Flush()
}
