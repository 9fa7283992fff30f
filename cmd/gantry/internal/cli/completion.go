package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/taskq"
	wsclient "github.com/gantryhq/gantry/workspace/client"
)

// Shell completion: cobra's `gantry completion bash|zsh|fish|powershell`
// scripts complete commands and flags by calling the hidden `gantry
// __complete`; the functions here add the values only a server knows:
// workspace ids and names (from `ws serve`, with the --server and --token
// the command line gives, else $GANTRY_SERVER and $GANTRY_TOKEN) and queue
// names (from --redis). A server that does not answer within
// completionTimeout completes nothing; completion never prints an error.

// completionTimeout bounds a completion's call to a server: a shell waits
// for it on every tab.
const completionTimeout = 2 * time.Second

const completionHelp = `Print a shell completion script for gantry.

Commands and flags complete from the script; workspace ids and names from a
running ws serve (--server/--token, else $GANTRY_SERVER/$GANTRY_TOKEN), and
queue names (--queue) from Redis (--redis).

  bash:        source <(gantry completion bash)     # or write it to /etc/bash_completion.d/gantry
  zsh:         gantry completion zsh > "${fpath[1]}/_gantry"
  fish:        gantry completion fish > ~/.config/fish/completions/gantry.fish
  powershell:  gantry completion powershell | Out-String | Invoke-Expression`

func newCompletionCmd() *cobra.Command {
	return &cobra.Command{
		Use:       "completion bash|zsh|fish|powershell",
		Short:     "Print a shell completion script (completes commands, flags, workspace and queue names)",
		Long:      completionHelp,
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		RunE: func(cmd *cobra.Command, args []string) error {
			root, out := cmd.Root(), cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(out, true)
			case "zsh":
				return root.GenZshCompletion(out)
			case "fish":
				return root.GenFishCompletion(out, true)
			default:
				return root.GenPowerShellCompletionWithDesc(out)
			}
		},
	}
}

// completeWorkspaceArgs gives ws's commands that take a workspace (their
// first argument is ID) the workspace completion.
func completeWorkspaceArgs(ws *cobra.Command, client func() *wsclient.Client) {
	walk(ws, func(c *cobra.Command) {
		if c.Parent() == ws && takesWorkspace(c.Use) && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = completeWorkspaces(client)
		}
	})
}

// completeQueueFlags gives every command under root with --queue and
// --redis flags the queue completion.
func completeQueueFlags(root *cobra.Command) {
	walk(root, func(c *cobra.Command) {
		if c.Flags().Lookup("queue") != nil && c.Flags().Lookup("redis") != nil {
			_ = c.RegisterFlagCompletionFunc("queue", completeQueues)
		}
	})
}

// takesWorkspace reports whether a ws command's usage names a workspace
// as its first argument ("get ID", "exec ID [-i] …"; not "ssh --stdio ID").
func takesWorkspace(use string) bool {
	f := strings.Fields(use)
	return len(f) > 1 && f[1] == "ID"
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

// completeWorkspaces completes a workspace command's first argument: the
// names of the workspaces the token sees, and their ids, each described by
// its state.
func completeWorkspaces(client func() *wsclient.Client) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := completionContext(cmd)
		defer cancel()
		ws, err := client().List(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, w := range ws {
			desc := fmt.Sprintf("%s, %s", w.ObservedStatus, w.Owner)
			if strings.HasPrefix(w.Name, toComplete) {
				out = append(out, cobra.CompletionWithDesc(w.Name, desc))
			}
			if toComplete != "" && strings.HasPrefix(w.ID, toComplete) {
				out = append(out, cobra.CompletionWithDesc(w.ID, w.Name+", "+desc))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeQueues completes --queue with the queues Redis (--redis) knows.
func completeQueues(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	addr, _ := cmd.Flags().GetString("redis")
	ctx, cancel := completionContext(cmd)
	defer cancel()
	qs, err := queueNames(ctx, addr)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, q := range qs {
		if strings.HasPrefix(q, toComplete) {
			out = append(out, q)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// queueNames lists the queues Redis at addr knows, in order.
func queueNames(ctx context.Context, addr string) ([]string, error) {
	type result struct {
		qs  []string
		err error
	}
	done := make(chan result, 1)
	go func() { // the inspector's connect has a timeout of its own, longer than a tab's
		in, err := taskq.NewInspector(addr)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer in.Close()
		qs, err := in.Queues(ctx)
		done <- result{qs, err}
	}()
	select {
	case r := <-done:
		return r.qs, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func completionContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, completionTimeout)
}
