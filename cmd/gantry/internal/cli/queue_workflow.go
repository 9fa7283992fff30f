package cli

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/taskq"
)

// `gantry queue workflow chain|chord`: enqueue a workflow (taskq.Workflow)
// of tasks given on the command line; it prints the workflow's id and the
// task id of each node, whose results `queue tasks get` shows.

func newQueueWorkflowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Enqueue a workflow: a chain (each task after the previous one) or a chord (a group, then a callback)",
	}
	cmd.AddCommand(newQueueWorkflowShapeCmd("chain"), newQueueWorkflowShapeCmd("chord"))
	return cmd
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
