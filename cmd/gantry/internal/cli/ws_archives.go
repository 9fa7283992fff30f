package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	wsclient "github.com/gantryhq/gantry/workspace/client"
)

func newWSArchivesCmd(client func() *wsclient.Client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "archives ID [--json]",
		Short: "List a workspace's archives (snapshots), newest first; * marks the one its next restore uses",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := client().Archives(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "\tKEY\tSIZE\tCREATED\tSHA256")
			for _, a := range list {
				mark, sum := "", a.SHA256
				if a.Current {
					mark = "*"
				}
				if !a.Committed {
					sum = "(uncommitted: an interrupted write)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", mark, a.Key, a.Size, a.Created.Local().Format(time.DateTime), sum)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newWSRestoreCmd(client func() *wsclient.Client) *cobra.Command {
	var key string
	var up bool
	cmd := &cobra.Command{
		Use:   "restore ID --archive KEY [--up]",
		Short: "Make an archived (PENDING) workspace's next restore use archive KEY (see ws archives); --up restores it now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := client()
			w, err := c.Restore(cmd.Context(), args[0], key)
			if err == nil && up {
				w, err = c.SetDesired(cmd.Context(), w.ID, workspace.Running)
			}
			if err != nil {
				return err
			}
			return printJSON(cmd, w)
		},
	}
	cmd.Flags().StringVar(&key, "archive", "", "the archive's key, as ws archives lists it")
	cmd.Flags().BoolVar(&up, "up", false, "then bring the workspace up (desired RUNNING)")
	cmd.MarkFlagRequired("archive")
	return cmd
}

func newWSForkCmd(client func() *wsclient.Client) *cobra.Command {
	var req api.ForkRequest
	cmd := &cobra.Command{
		Use:   "fork ID NAME [--desired STATE] [--archive latest|KEY]",
		Short: "Make a new workspace with ID's spec and a copy of its files (ID stopped or archived; or from an archive of it); prints its id",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[1]
			w, err := client().Fork(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), w.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.DesiredState, "desired", "", "the new workspace's desired state: STANDBY (default), RUNNING or PENDING")
	cmd.Flags().StringVar(&req.Archive, "archive", "", "copy this archive of ID's (latest, or a key from ws archives) instead of its current files: the way to fork a RUNNING workspace")
	return cmd
}
