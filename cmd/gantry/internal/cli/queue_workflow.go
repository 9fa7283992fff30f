package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/taskq"
)

// `gantry queue workflow chain|chord`: enqueue a workflow (taskq.Workflow)
// of tasks given on the command line; it prints the workflow's id and the
// task id of each node, whose results `queue tasks get` shows. `list`,
// `get` and `cancel` inspect and stop one.

func newQueueWorkflowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Enqueue a workflow: a chain (each task after the previous one) or a chord (a group, then a callback)",
	}
	cmd.AddCommand(newQueueWorkflowShapeCmd("chain"), newQueueWorkflowShapeCmd("chord"), newQueueWorkflowInspectCmd("list"),
		newQueueWorkflowInspectCmd("get"), newQueueWorkflowInspectCmd("cancel"))
	return cmd
}

// newQueueWorkflowInspectCmd is `queue workflow list|get|cancel`.
func newQueueWorkflowInspectCmd(op string) *cobra.Command {
	var redis, queue string
	var limit int
	uses := map[string][2]string{
		"list":   {"list --queue Q", "List a queue's workflows, newest first (kept as long as dead tasks)"},
		"get":    {"get ID --queue Q", "Show a workflow's nodes: name, task id, state, result"},
		"cancel": {"cancel ID --queue Q", "Cancel every node of a workflow that has not ended (running ones: their handlers are cancelled)"},
	}
	args := cobra.ExactArgs(1)
	if op == "list" {
		args = cobra.NoArgs
	}
	cmd := &cobra.Command{
		Use:   uses[op][0],
		Short: uses[op][1],
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			if op == "list" && limit < 1 {
				return fmt.Errorf("workflow list: --limit %d: want at least 1", limit)
			}
			in, err := taskq.NewInspector(redis)
			if err != nil {
				return err
			}
			defer in.Close()
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			if op == "list" {
				ids, err := in.Workflows(ctx, queue, limit)
				for _, id := range ids {
					fmt.Fprintln(out, id)
				}
				return err
			}
			info, err := in.LoadWorkflow(ctx, queue, args[0])
			if err != nil {
				return err
			}
			if op == "cancel" {
				n, err := in.CancelWorkflow(ctx, info, "cli")
				fmt.Fprintf(out, "cancelled %d node(s) and those waiting below them\n", n)
				return err
			}
			nodes, err := in.Workflow(ctx, info)
			if err != nil {
				return err
			}
			names := make([]string, 0, len(nodes))
			for name := range nodes {
				names = append(names, name)
			}
			sort.Strings(names)
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tTASK\tSTATE\tAFTER\tRESULT")
			for _, name := range names {
				d := nodes[name]
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", name, info.Tasks[name], d.State, len(d.Parents), clipResult(d.Result))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	cmd.Flags().StringVar(&queue, "queue", taskq.DefaultQueue, "the workflow's queue")
	if op == "list" {
		cmd.Flags().IntVar(&limit, "limit", 100, "at most this many")
	}
	return cmd
}

// clipResult is a result as a table cell: text up to 40 bytes.
func clipResult(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '.'
		}
		return r
	}, string(b))
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}

// queueWorkflowOptions are `queue workflow chain|chord`'s flags.
type queueWorkflowOptions struct {
	redis, queue, tenant, typ string
	payloads                  []string
	cbType, cbPayload         string
	maxRetries                int
}

func newQueueWorkflowShapeCmd(shape string) *cobra.Command {
	var o queueWorkflowOptions
	use, short := "chain --type TYPE --payload JSON [--payload JSON]...", "Enqueue a chain: one task per --payload, each run after the previous one succeeded, reading its result"
	if shape == "chord" {
		use = "chord --type TYPE --payload JSON [--payload JSON]... --callback-type TYPE [--callback-payload JSON]"
		short = "Enqueue a chord: one task per --payload, side by side, then the callback once all succeeded, reading all their results"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			wf, err := o.workflow(shape)
			if err != nil {
				return err
			}
			c, err := taskq.NewClient(taskq.ClientConfig{Redis: o.redis})
			if err != nil {
				return err
			}
			defer c.Close()
			info, err := c.EnqueueWorkflow(cmd.Context(), wf, taskq.Queue(o.queue), taskq.Tenant(o.tenant), taskq.MaxRetries(o.maxRetries))
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(info)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	f.StringVar(&o.queue, "queue", taskq.DefaultQueue, "queue name (a workflow runs in one queue)")
	f.StringVar(&o.tenant, "tenant", taskq.DefaultTenant, "tenant (fairness key) of every node")
	f.StringVar(&o.typ, "type", "", "task type of the nodes (required)")
	f.StringArrayVar(&o.payloads, "payload", nil, "a node's payload (JSON); one node per --payload, in order")
	f.IntVar(&o.maxRetries, "max-retries", taskq.DefaultMaxRetries, "retries of each node before the dead-letter set (a dead node cancels the nodes after it)")
	if shape == "chord" {
		f.StringVar(&o.cbType, "callback-type", "", "task type of the callback (required)")
		f.StringVar(&o.cbPayload, "callback-payload", "", "the callback's payload (JSON)")
	}
	return cmd
}

// workflow is the chain or chord the flags describe.
func (o *queueWorkflowOptions) workflow(shape string) (*taskq.Workflow, error) {
	if o.typ == "" || len(o.payloads) == 0 {
		return nil, errors.New("give --type and at least one --payload")
	}
	tasks := make([]*taskq.Task, len(o.payloads))
	for i, p := range o.payloads {
		if p != "" && !json.Valid([]byte(p)) {
			return nil, fmt.Errorf("--payload %q is not JSON", p)
		}
		tasks[i] = taskq.NewTask(o.typ, []byte(p))
	}
	if shape == "chain" {
		return taskq.Chain(tasks...), nil
	}
	if o.cbType == "" {
		return nil, errors.New("a chord needs --callback-type")
	}
	if o.cbPayload != "" && !json.Valid([]byte(o.cbPayload)) {
		return nil, fmt.Errorf("--callback-payload %q is not JSON", o.cbPayload)
	}
	return taskq.Chord(tasks, taskq.NewTask(o.cbType, []byte(o.cbPayload))), nil
}
