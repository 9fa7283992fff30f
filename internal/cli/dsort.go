package cli

import "github.com/spf13/cobra"

// addDistributedSortCmds adds `sort master`, `sort worker` and `sort status`.
func addDistributedSortCmds(parent *cobra.Command, env *Env) {}
