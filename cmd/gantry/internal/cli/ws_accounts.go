package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/workspace/api"
	wsclient "github.com/gantryhq/gantry/workspace/client"
)

// wsClientFlags are the client flags of every `gantry ws` command: where
// the server is, the token, and the CA that signed the server's certificate.
type wsClientFlags struct {
	server, token, caCert string
}

func (f *wsClientFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.server, "server", "", "API URL (default $GANTRY_SERVER or "+defaultWSServer+")")
	fs.StringVar(&f.token, "token", "", "API token (default $GANTRY_TOKEN; ws serve writes the first admin token to <data>/admin-token)")
	fs.StringVar(&f.caCert, "ca-cert", "", "PEM file of the CA that signed an https server's certificate (default $GANTRY_CA_CERT, else the system pool)")
}

// client builds the API client; a --ca-cert that cannot be read fails the
// command's first request with the reason.
func (f *wsClientFlags) client() *wsclient.Client {
	c := &wsclient.Client{
		Base:  strings.TrimRight(firstOf(f.server, os.Getenv("GANTRY_SERVER"), defaultWSServer), "/"),
		Token: strings.TrimSpace(firstOf(f.token, os.Getenv("GANTRY_TOKEN"))),
	}
	hc, err := wsclient.NewHTTPClient(firstOf(f.caCert, os.Getenv("GANTRY_CA_CERT")))
	if err != nil {
		hc = &http.Client{Transport: failingTransport{err}}
	}
	c.HTTP = hc
	return c
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

type failingTransport struct{ err error }

func (t failingTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, t.err }

func newWSWhoamiCmd(client func() *wsclient.Client) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show the owner (and admin flag) of the token in use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w, err := client().Whoami(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "owner: %s\nadmin: %v\ntoken: %s\n", w.Owner, w.Admin, w.TokenID)
			return nil
		},
	}
}

func newWSTokenCmd(client func() *wsclient.Client) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "API tokens (admin): create, list, revoke"}
	cmd.AddCommand(newWSTokenCreateCmd(client), newWSTokenListCmd(client), newWSTokenRevokeCmd(client))
	return cmd
}

func newWSTokenCreateCmd(client func() *wsclient.Client) *cobra.Command {
	var req api.TokenRequest
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "create --owner NAME",
		Short: "Create a token; prints its secret once on stdout (its id on stderr)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Owner == "" {
				return fmt.Errorf("--owner is required")
			}
			if expires < 0 {
				return fmt.Errorf("--expires %v: want a positive duration", expires)
			}
			if expires > 0 {
				req.ExpiresIn = expires.String()
			}
			t, err := client().CreateToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s for owner %s (admin %v); the secret below is shown once\n", t.ID, t.Owner, t.Admin)
			fmt.Fprintln(cmd.OutOrStdout(), t.Secret)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Owner, "owner", "", "owner of the token and of the workspaces it creates (a-z, 0-9, . _ -)")
	cmd.Flags().BoolVar(&req.Admin, "admin", false, "an admin token: sees and acts on every owner's workspaces, manages tokens")
	cmd.Flags().DurationVar(&expires, "expires", 0, "the token stops working after this long (default never)")
	return cmd
}

func newWSTokenListCmd(client func() *wsclient.Client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, err := client().Tokens(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, ts)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tOWNER\tADMIN\tCREATED\tLAST USED\tEXPIRES\tREVOKED")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%s\n", t.ID, t.Owner, t.Admin, t.CreatedAt.Format(time.RFC3339),
					optTime(t.LastUsed), optTime(t.ExpiresAt), optTime(t.RevokedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func optTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func newWSTokenRevokeCmd(client func() *wsclient.Client) *cobra.Command {
	return idCmd("revoke", "Revoke a token: its next request is refused, its page sessions end", func(ctx context.Context, id string) error {
		_, err := client().RevokeToken(ctx, id)
		return err
	})
}

func newWSAuditCmd(client func() *wsclient.Client) *cobra.Command {
	var q wsclient.AuditQuery
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit log (admin): every mutating request, accepted or refused",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			es, err := client().Audit(cmd.Context(), q)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, es)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tOWNER\tTOKEN\tACTION\tWORKSPACE\tSTATUS\tREMOTE\tDETAIL")
			for _, e := range es {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.At.Format(time.RFC3339), dash(e.Owner), dash(e.TokenID),
					e.Action, dash(e.Workspace), e.Status, e.Remote, e.Detail)
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&q.Workspace, "workspace", "", "only this workspace id")
	f.StringVar(&q.Owner, "owner", "", "only this owner's requests")
	f.StringVar(&q.Since, "since", "", "only rows since a duration ago (24h) or an RFC 3339 time")
	f.IntVar(&q.Limit, "limit", 1000, "at most this many rows (the newest)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newWSLogsCmd(client func() *wsclient.Client) *cobra.Command {
	var tail int
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID [-f] [--tail N]",
		Short: "Print a workspace command's output (-f: keep following it, across restarts)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return client().Logs(cmd.Context(), args[0], tail, follow, cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&tail, "tail", 0, "only the last N lines (0: all)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what the command writes until Ctrl-C")
	return cmd
}
