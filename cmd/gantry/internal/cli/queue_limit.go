package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/taskq"
)

// gantry queue limit set|list|clear: rate limits, in-flight caps and
// admin weights per queue and tenant, enforced inside the dequeue.
func newQueueLimitCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "limit", Short: "Rate limits, in-flight caps and weights per queue or tenant, across all workers"}
	cmd.AddCommand(newQueueLimitSetCmd(), newQueueLimitListCmd(), newQueueLimitClearCmd())
	return cmd
}

func newQueueLimitSetCmd() *cobra.Command {
	var o queueInspectFlags
	var tenant, rate string
	var l taskq.Limit
	cmd := &cobra.Command{Use: "set --queue Q [--tenant T] [--rate N/s] [--burst B] [--max-active N] [--weight W]",
		Short: "Limit a queue or one tenant of it (replaces its limit; effective at every worker's next dequeue)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.queue == "" {
				return fmt.Errorf("--queue is required")
			}
			if rate != "" {
				r, err := taskq.ParseRate(rate)
				if err != nil {
					return fmt.Errorf("--rate: %w", err)
				}
				l.Rate = r
			}
			return o.withInspector(func(in *taskq.Inspector) error {
				if err := in.SetLimit(cmd.Context(), o.queue, tenant, l); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "limited %s: %s\n", limitSubject(o.queue, tenant), describeLimit(l))
				return nil
			})
		}}
	f := cmd.Flags()
	f.StringVar(&o.redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	f.StringVar(&o.queue, "queue", "", "queue name (required)")
	f.StringVar(&tenant, "tenant", "", "limit this tenant of the queue, or a node of its tenant tree (acme/web: for all the tenants below it; its weight among its siblings) (default: the whole queue)")
	f.StringVar(&rate, "rate", "", "tasks started per second, minute or hour: 20/s, 300/m, 1000/h")
	f.IntVar(&l.Burst, "burst", 0, "how many may start at once after a quiet spell (default 1 with --rate)")
	f.IntVar(&l.MaxActive, "max-active", 0, "tasks running at once, across all workers")
	f.Float64Var(&l.Weight, "weight", 0, "the tenant's fair-share weight, overriding its enqueues' --weight")
	return cmd
}

func newQueueLimitListCmd() *cobra.Command {
	var o queueInspectFlags
	cmd := &cobra.Command{Use: "list [--queue Q] [--json]", Short: "List limits with their current use (every queue by default)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.withInspector(func(in *taskq.Inspector) error {
				ls, err := in.Limits(cmd.Context(), o.queue)
				if err != nil {
					return err
				}
				if o.asJSON {
					if ls == nil {
						ls = []taskq.LimitInfo{}
					}
					return json.NewEncoder(cmd.OutOrStdout()).Encode(ls)
				}
				printLimits(cmd.OutOrStdout(), ls)
				return nil
			})
		}}
	o.register(cmd.Flags(), "only this queue")
	return cmd
}

func newQueueLimitClearCmd() *cobra.Command {
	var o queueInspectFlags
	var tenant string
	var all bool
	cmd := &cobra.Command{Use: "clear --queue Q [--tenant T | --all]", Short: "Remove the limit of a queue or of one tenant (--all: every limit of the queue)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.queue == "" {
				return fmt.Errorf("--queue is required")
			}
			if all && tenant != "" {
				return fmt.Errorf("--all and --tenant exclude each other")
			}
			return o.withInspector(func(in *taskq.Inspector) error {
				var had bool
				var err error
				what := limitSubject(o.queue, tenant)
				if all {
					had, err = in.ClearLimits(cmd.Context(), o.queue)
					what = "every limit of queue " + o.queue
				} else {
					had, err = in.ClearLimit(cmd.Context(), o.queue, tenant)
				}
				if err != nil {
					return err
				}
				if !had {
					return fmt.Errorf("limit clear: %s has no limit", what)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "cleared %s\n", what)
				return nil
			})
		}}
	f := cmd.Flags()
	f.StringVar(&o.redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	f.StringVar(&o.queue, "queue", "", "queue name (required)")
	f.StringVar(&tenant, "tenant", "", "the tenant whose limit to remove (default: the queue's own)")
	f.BoolVar(&all, "all", false, "remove every limit of the queue, its tenants' too")
	return cmd
}

func limitSubject(q, tenant string) string {
	if tenant == "" {
		return "queue " + q
	}
	return "tenant " + tenant + " of queue " + q
}

// describeLimit is a limit in the CLI's words: "20/s burst 1, max-active 3, weight 2".
func describeLimit(l taskq.Limit) string {
	s := ""
	add := func(p string) {
		if s != "" {
			s += ", "
		}
		s += p
	}
	if l.Rate > 0 {
		add(strconv.FormatFloat(l.Rate, 'g', 4, 64) + "/s burst " + strconv.Itoa(max(l.Burst, 1)))
	}
	if l.MaxActive > 0 {
		add("max-active " + strconv.Itoa(l.MaxActive))
	}
	if l.Weight > 0 {
		add("weight " + strconv.FormatFloat(l.Weight, 'g', -1, 64))
	}
	return s
}

func printLimits(w io.Writer, ls []taskq.LimitInfo) {
	if len(ls) == 0 {
		fmt.Fprintln(w, "no limits")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tTENANT\tLIMIT\tACTIVE\tTOKENS\tTHROTTLED")
	for _, l := range ls {
		tenant := l.Tenant
		if tenant == "" {
			tenant = "(queue)"
		}
		tok := "-"
		if l.Rate > 0 {
			tok = strconv.FormatFloat(l.Tokens, 'f', 2, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", l.Queue, tenant, describeLimit(l.Limit), l.Active, tok, throttledNote(l.ThrottledUntil))
	}
	tw.Flush()
}

func throttledNote(until time.Time) string {
	switch {
	case until.IsZero():
		return "-"
	case until.Equal(taskq.Indefinitely):
		return "until a task ends"
	}
	return "until " + until.Format("15:04:05.000")
}
