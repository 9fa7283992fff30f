package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/taskq"
)

// queueInspectFlags are the flags every inspector command shares.
type queueInspectFlags struct {
	redis, queue string
	asJSON       bool
}

func (o *queueInspectFlags) register(f *pflag.FlagSet, queueHelp string) {
	f.StringVar(&o.redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	f.StringVar(&o.queue, "queue", "", queueHelp)
	f.BoolVar(&o.asJSON, "json", false, "print JSON")
}

// withInspector connects, runs fn and closes.
func (o *queueInspectFlags) withInspector(fn func(*taskq.Inspector) error) error {
	in, err := taskq.NewInspector(o.redis)
	if err != nil {
		return err
	}
	defer in.Close()
	return fn(in)
}

func newQueueTasksCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tasks", Short: "Inspect and steer single tasks: list, get, delete, run, cancel"}
	cmd.AddCommand(newQueueTasksListCmd())
	for _, op := range []struct{ name, short string }{
		{"get", "Show one task: queue, tenant, state, attempts, last error, result, times"},
		{"delete", "Delete a task that is not running (pending, scheduled, retry, dead, completed, cancelled)"},
		{"run", "Make a scheduled, retry, dead or cancelled task pending now"},
		{"cancel", "Cancel a task: a waiting one never runs, a running one has its handler cancelled; never retried"},
	} {
		var o queueInspectFlags
		sub := &cobra.Command{Use: op.name + " ID", Short: op.short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return runQueueTaskOp(cmd, op.name, args[0], &o) }}
		o.register(sub.Flags(), "the task's queue (default: look in every queue)")
		cmd.AddCommand(sub)
	}
	return cmd
}

// runQueueTaskOp runs get, delete, run or cancel on one task and prints it.
func runQueueTaskOp(cmd *cobra.Command, op, id string, o *queueInspectFlags) error {
	return o.withInspector(func(in *taskq.Inspector) error {
		ctx := cmd.Context()
		var d taskq.TaskDetail
		var err error
		switch op {
		case "get":
			d, err = in.Get(ctx, o.queue, id)
		case "delete":
			d, err = in.Delete(ctx, o.queue, id)
		case "run":
			d, err = in.Run(ctx, o.queue, id)
		case "cancel":
			d, err = in.Cancel(ctx, o.queue, id, operator())
		}
		if err != nil {
			return err
		}
		if op != "get" && !o.asJSON {
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s %s (queue %s)\n", op, id, map[string]string{"delete": "deleted", "run": "pending now", "cancel": "cancelled"}[op], d.Queue)
			return nil
		}
		return printTask(cmd.OutOrStdout(), d, o.asJSON)
	})
}

// operator names who cancels, for the task's record: $USER@host.
func operator() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && name == "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

func printTask(w io.Writer, d taskq.TaskDetail, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(d)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	opt := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.Format(time.RFC3339Nano)
	}
	row("id", d.ID)
	row("queue", d.Queue)
	row("tenant", d.Tenant)
	row("type", d.Type)
	row("state", d.State)
	row("attempts", fmt.Sprintf("%d started, %d retried of %d", d.Starts, d.Retried, d.MaxRetries))
	row("enqueued", d.EnqueuedAt.Format(time.RFC3339Nano))
	row("due", opt(d.DueAt))
	row("lease until", opt(d.LeaseUntil))
	row("ended", opt(d.EndedAt))
	row("kept until", opt(d.KeptUntil))
	row("cancelled by", d.CancelledBy)
	row("last error", d.LastError)
	row("dead reason", d.DeadReason)
	if p := d.Progress; p != nil {
		row("progress", fmt.Sprintf("%g%% %s (attempt %d, %s)", p.Percent, p.Note, p.Attempt, p.At.Format(time.RFC3339Nano)))
	}
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row("header "+k, d.Headers[k])
	}
	row("payload", string(d.Payload))
	row("result", string(d.Result))
	return tw.Flush()
}

func newQueueTasksListCmd() *cobra.Command {
	var o queueInspectFlags
	var state string
	var lo taskq.ListOptions
	cmd := &cobra.Command{
		Use:   "list --queue Q [--state S] [--tenant T] [--limit N] [--cursor C]",
		Short: "List a queue's tasks in one state, a page at a time (the next page's --cursor is printed last)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.queue == "" {
				return fmt.Errorf("tasks list: --queue is required")
			}
			if lo.Limit < 1 {
				return fmt.Errorf("tasks list: --limit %d: want at least 1", lo.Limit)
			}
			return o.withInspector(func(in *taskq.Inspector) error {
				p, err := in.List(cmd.Context(), o.queue, state, lo)
				if err != nil {
					return err
				}
				return printTaskPage(cmd, p, o.asJSON)
			})
		},
	}
	f := cmd.Flags()
	o.register(f, "queue name (required)")
	f.StringVar(&state, "state", taskq.StatePending, "pending, scheduled, active, retry, dead, completed or cancelled")
	f.StringVar(&lo.Tenant, "tenant", "", "only this tenant's tasks")
	f.IntVar(&lo.Limit, "limit", 100, "at most this many per page")
	f.StringVar(&lo.Cursor, "cursor", "", "continue after the page that printed this cursor")
	return cmd
}

func printTaskPage(cmd *cobra.Command, p taskq.TaskPage, asJSON bool) error {
	out := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(out).Encode(p)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tTYPE\tSTATE\tSTARTS\tRETRIED\tWHEN\tLAST ERROR")
	for _, d := range p.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", d.ID, d.Tenant, d.Type, d.State, d.Starts, d.Retried,
			taskWhen(d), strings.ReplaceAll(d.LastError, "\n", " "))
	}
	tw.Flush()
	if p.Next != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "more: --cursor %s\n", p.Next)
	}
	return nil
}

// taskWhen is the WHEN column: the time that matters in the task's state,
// saying which: enqueued (pending), due (scheduled, retry), lease until
// (active: its worker's lease, which heartbeats extend), ended (dead,
// cancelled, completed) or kept until (a retained completed task).
func taskWhen(d taskq.TaskDetail) string {
	when := "enqueued " + d.EnqueuedAt.Format(time.RFC3339)
	for _, t := range []struct {
		what string
		at   *time.Time
	}{{"due", d.DueAt}, {"lease until", d.LeaseUntil}, {"ended", d.EndedAt}, {"kept until", d.KeptUntil}} {
		if t.at != nil {
			when = t.what + " " + t.at.Format(time.RFC3339)
		}
	}
	return when
}

func newQueuePauseCmds() []*cobra.Command {
	var cmds []*cobra.Command
	for _, pause := range []bool{true, false} {
		var o queueInspectFlags
		var tenant string
		var d time.Duration
		use, short := "resume --queue Q [--tenant T]", "Resume a paused queue, or one tenant of it"
		if pause {
			use, short = "pause --queue Q [--tenant T] [--for D]", "Stop dequeuing a queue, or one tenant of it (enqueue still works); for D, or until resume"
		}
		cmd := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if o.queue == "" {
					return fmt.Errorf("--queue is required")
				}
				return o.withInspector(func(in *taskq.Inspector) error {
					return runQueuePause(cmd.Context(), cmd.OutOrStdout(), in, pause, o.queue, tenant, d)
				})
			}}
		f := cmd.Flags()
		f.StringVar(&o.redis, "redis", "127.0.0.1:6379", redisFlagHelp)
		f.StringVar(&o.queue, "queue", "", "queue name (required)")
		f.StringVar(&tenant, "tenant", "", "only this tenant of the queue")
		if pause {
			f.DurationVar(&d, "for", 0, "resume by itself after this long (default: until gantry queue resume)")
		}
		cmds = append(cmds, cmd)
	}
	return cmds
}

func runQueuePause(ctx context.Context, out io.Writer, in *taskq.Inspector, pause bool, q, tenant string, d time.Duration) error {
	what := "queue " + q
	if tenant != "" {
		what = "tenant " + tenant + " of queue " + q
	}
	if !pause {
		if err := in.Resume(ctx, q, tenant); err != nil {
			return err
		}
		fmt.Fprintf(out, "resumed %s\n", what)
		return nil
	}
	if err := in.Pause(ctx, q, tenant, d); err != nil {
		return err
	}
	if d > 0 {
		fmt.Fprintf(out, "paused %s until %s\n", what, time.Now().Add(d).Format(time.RFC3339))
	} else {
		fmt.Fprintf(out, "paused %s until resumed\n", what)
	}
	return nil
}
