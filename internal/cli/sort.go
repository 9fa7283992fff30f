package cli

import "github.com/spf13/cobra"

func newSortCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sort",
		Short: "Sort gensort records: on one machine (local) or over many (master/worker)",
	}
	cmd.AddCommand(newSortLocalCmd(env))
	addDistributedSortCmds(cmd, env)
	return cmd
}

func newSortLocalCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "local", Short: "(not built yet)"}
}
