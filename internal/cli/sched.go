package cli

import "github.com/spf13/cobra"

func newSchedCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "sched", Short: "(not built yet)", Hidden: true}
}
