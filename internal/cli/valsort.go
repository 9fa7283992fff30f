package cli

import "github.com/spf13/cobra"

func newValsortCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "valsort", Short: "(not built yet)", Hidden: true}
}
