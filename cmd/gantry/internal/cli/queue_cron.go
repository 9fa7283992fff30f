package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/taskq"
)

func newQueueCronCmd() *cobra.Command {
	var redis string
	cmd := &cobra.Command{
		Use:   "cron add|list|remove",
		Short: "Periodic tasks: entries every worker's scheduler enqueues once per tick",
	}
	cmd.PersistentFlags().StringVar(&redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	client := func() (*taskq.Client, error) { return taskq.NewClient(taskq.ClientConfig{Redis: redis}) }
	cmd.AddCommand(newQueueCronAddCmd(client), newQueueCronListCmd(client), newQueueCronRemoveCmd(client))
	return cmd
}

func newQueueCronAddCmd(client func() (*taskq.Client, error)) *cobra.Command {
	var e taskq.CronEntry
	var payload string
	cmd := &cobra.Command{
		Use:   "add --name N --spec SPEC --queue Q --type T [--tenant T] [--payload JSON] [--tz ZONE] [--missed skip|once]",
		Short: "Add (or replace) a periodic task; running workers pick it up within a second",
		Long: `SPEC is a cron expression with optional seconds ("*/10 * * * * *", "0 9 * * MON-FRI"),
a descriptor (@hourly, @daily, @weekly, @monthly) or "@every D" (D >= 1s; ticks at multiples
of D). Each tick is enqueued once however many workers run. --missed once enqueues the latest
tick missed while no worker ran; skip (the default) waits for the next.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if payload != "" {
				if !json.Valid([]byte(payload)) {
					return fmt.Errorf("cron add: --payload is not valid JSON: %s", payload)
				}
				e.Payload = []byte(payload)
			}
			c, err := client()
			if err != nil {
				return err
			}
			defer c.Close()
			isNew, err := c.CronAdd(cmd.Context(), e)
			if err != nil {
				return err
			}
			verb := "added"
			if !isNew {
				verb = "replaced"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s → %s/%s\n", verb, e.Name, e.Spec, e.Queue, e.Type)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&e.Name, "name", "", "entry name (required)")
	f.StringVar(&e.Spec, "spec", "", "schedule (required)")
	f.StringVar(&e.Queue, "queue", taskq.DefaultQueue, "queue of the tasks")
	f.StringVar(&e.Type, "type", "", "task type (required)")
	f.StringVar(&e.Tenant, "tenant", "", "tenant of the tasks (default: default)")
	f.StringVar(&payload, "payload", "", "task payload (JSON)")
	f.StringVar(&e.TZ, "tz", "", "time zone of a cron expression, e.g. Europe/Berlin (default UTC)")
	f.StringVar(&e.Missed, "missed", taskq.MissedSkip, "ticks missed while no worker ran: skip, or once (enqueue the latest)")
	return cmd
}

func newQueueCronListCmd(client func() (*taskq.Client, error)) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List periodic tasks with their last and next tick (in each entry's --tz, named)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			defer c.Close()
			list, err := c.CronList(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSPEC\tQUEUE\tTYPE\tTENANT\tLAST\tNEXT")
			for _, e := range list {
				last := "-"
				if !e.Last.IsZero() {
					last = cronTime(e.Last, e.TZ)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Spec, e.Queue, e.Type, e.Tenant, last, cronTime(e.Next, e.TZ))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// cronTime shows a tick in its entry's time zone (tz, default UTC) and
// names the zone, so that a spec's hour reads as written: a nightly
// '0 0 2 * * *' in Europe/Berlin shows as 02:00:00 CET.
func cronTime(t time.Time, tz string) string {
	loc, err := time.LoadLocation(tz) // "" is UTC
	if err != nil {
		loc = time.UTC
	}
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
}

func newQueueCronRemoveCmd(client func() (*taskq.Client, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a periodic task (running workers stop enqueuing it within a second)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			defer c.Close()
			ok, err := c.CronRemove(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !ok {
				return withCode(1, errors.New("cron remove: no entry "+args[0]))
			}
			fmt.Fprintln(cmd.OutOrStdout(), "removed", args[0])
			return nil
		},
	}
}
