package cli

import "github.com/spf13/cobra"

func newGensortCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "gensort", Short: "(not built yet)", Hidden: true}
}
