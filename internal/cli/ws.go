package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/fake"
)

const defaultWSServer = "http://127.0.0.1:7480"

func newWSCmd(env *Env) *cobra.Command {
	var server string
	cmd := &cobra.Command{
		Use:   "ws",
		Short: "Workspaces: a level-triggered reconciler (serve) and its client commands",
	}
	cmd.PersistentFlags().StringVar(&server, "server", "", "API URL (default $GANTRY_SERVER or "+defaultWSServer+")")
	client := func() *workspace.Client {
		s := server
		if s == "" {
			s = os.Getenv("GANTRY_SERVER")
		}
		if s == "" {
			s = defaultWSServer
		}
		return &workspace.Client{Base: strings.TrimRight(s, "/")}
	}
	cmd.AddCommand(newWSServeCmd(env), newWSCreateCmd(client), newWSListCmd(client), newWSGetCmd(client),
		newWSDesiredCmd(client, "up", workspace.Running, "Bring a workspace up (desired RUNNING)"),
		newWSDesiredCmd(client, "down", workspace.Standby, "Stop a workspace, keep its volume (desired STANDBY)"),
		newWSDesiredCmd(client, "archive", workspace.Pending, "Archive a workspace and remove its volume (desired PENDING)"),
		newWSDeleteCmd(client), newWSRecoverCmd(client), newWSWaitCmd(client), newWSTouchCmd(client))
	return cmd
}

func newWSServeCmd(env *Env) *cobra.Command {
	var cfg workspace.ServerConfig
	var prov string
	var fakeLatency time.Duration
	var interval, backoff, lease, monInterval time.Duration
	var maxRetries int
	timeouts := map[workspace.Operation]*time.Duration{}
	var backends wsBackendFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the API, web page, reconciler, health monitor and TTL manager (SQLite under --data by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := workspace.ConfigFromEnv(os.Getenv)
			if err != nil {
				return err
			}
			f := cmd.Flags()
			if f.Changed("interval") {
				rc.Interval = interval
			}
			if f.Changed("retry-backoff") {
				rc.RetryBackoff = backoff
			}
			if f.Changed("max-retries") {
				rc.MaxRetries = maxRetries
				if maxRetries == 0 {
					rc.MaxRetries = -1
				}
			}
			for op, d := range timeouts {
				if f.Changed(strings.ToLower(string(op)) + "-timeout") {
					rc.Timeouts[op] = *d
				}
			}
			for name, d := range map[string]time.Duration{"interval": interval, "retry-backoff": backoff, "op-lease": lease, "monitor-interval": monInterval} {
				if f.Changed(name) && d <= 0 {
					return fmt.Errorf("--%s %v: want a positive duration", name, d)
				}
			}
			rc.Lease = lease
			cfg.Reconciler = rc
			cfg.Monitor.Interval = monInterval
			switch prov {
			case "process":
			case "fake":
				fk := fake.New(fakeLatency)
				cfg.Container, cfg.Storage = fk, fk
			case "docker": // issue 13: the container comes from backends.apply
			default:
				return fmt.Errorf("--provider %q: want process, docker or fake", prov)
			}
			if err := backends.apply(cmd.Context(), &cfg, prov, env.Logger); err != nil { // issue 13: docker, --storage s3://…
				return err
			}
			if err := backends.singletons(&cfg); err != nil { // issue 13: TTL manager, leader lease
				return err
			}
			cfg.Logger = env.Logger
			cfg.Registry = env.registerer()
			srv, err := workspace.NewServer(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if err := mountLive(cmd.Context(), srv, env); err != nil { // issue 13: page, SSE, metrics, probes
				return err
			}
			return srv.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DB, "db", "", "database: sqlite:PATH or postgres://… (default sqlite:<data>/workspaces.db)")
	f.StringVar(&cfg.Data, "data", "gantry-ws-data", "directory for the database, volumes, archives and pidfiles")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7480", "API address")
	f.StringVar(&cfg.Redis, "redis", "", "Redis URL for hints (redis://127.0.0.1:6379/0); default: in-process or Postgres NOTIFY")
	backends.register(f) // issue 13: --storage, --docker-image
	f.StringVar(&prov, "provider", "process", "providers: process (+ fs volumes/archives) or fake (tests, benchmarks)")
	f.DurationVar(&fakeLatency, "fake-latency", 10*time.Millisecond, "latency of each fake provider call")
	f.DurationVar(&interval, "interval", 10*time.Second, "reconcile interval (overrides RECONCILER_INTERVAL)")
	f.IntVar(&maxRetries, "max-retries", 3, "retries after a failed provider call (overrides RECONCILER_MAX_RETRIES)")
	f.DurationVar(&backoff, "retry-backoff", 30*time.Second, "first retry delay, doubled per retry (overrides RECONCILER_RETRY_BACKOFF)")
	f.DurationVar(&lease, "op-lease", 15*time.Second, "how long a claimed operation survives a dead replica before another takes it over")
	f.DurationVar(&monInterval, "monitor-interval", 30*time.Second, "health monitor interval")
	for op, def := range map[workspace.Operation]time.Duration{workspace.OpStarting: 300 * time.Second, workspace.OpStopping: 300 * time.Second, workspace.OpArchiving: 1800 * time.Second, workspace.OpRestoring: 1800 * time.Second} {
		d := new(time.Duration)
		timeouts[op] = d
		f.DurationVar(d, strings.ToLower(string(op))+"-timeout", def, fmt.Sprintf("%s timeout (overrides RECONCILER_%s_TIMEOUT)", op, op))
	}
	return cmd
}

func newWSCreateCmd(client func() *workspace.Client) *cobra.Command {
	var n workspace.NewWorkspace
	var desired string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a workspace (it gets an empty volume: STANDBY); prints its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n.Name = args[0]
			n.Desired = workspace.Status(desired)
			w, err := client().Create(cmd.Context(), n)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), w.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&n.Command, "cmd", "", "command run in the volume while RUNNING (default: "+`"exec sleep infinity"`+")")
	cmd.Flags().StringVar(&n.Image, "image", "", "container image (docker provider)")
	cmd.Flags().StringVar(&desired, "desired", "", "initial desired state: STANDBY (default), RUNNING or PENDING")
	return cmd
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newWSListCmd(client func() *workspace.Client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workspaces",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := client().List(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, ws)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tDESIRED\tOBSERVED\tOPERATION\tERROR")
			for _, w := range ws {
				e := ""
				if w.ErrorInfo != nil {
					e = w.ErrorInfo.Reason
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.Name, w.DesiredState, w.ObservedStatus, w.Operation, e)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newWSGetCmd(client func() *workspace.Client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show one workspace (by id or name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := client().Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, w)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "id:              %s\nname:            %s\ndesired_state:   %s\nobserved_status: %s\noperation:       %s\narchive_key:     %s\nvolume:          %s\n",
				w.ID, w.Name, w.DesiredState, w.ObservedStatus, w.Operation, w.ArchiveKey, w.Volume)
			if w.ErrorInfo != nil {
				fmt.Fprintf(out, "error:           %s (%s, terminal=%v): %s\n", w.ErrorInfo.Reason, w.ErrorInfo.Operation, w.ErrorInfo.IsTerminal, w.ErrorInfo.LastError)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newWSDesiredCmd(client func() *workspace.Client, use string, st workspace.Status, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := client().SetDesired(cmd.Context(), args[0], st)
			return err
		},
	}
}

func newWSDeleteCmd(client func() *workspace.Client) *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a workspace: stop it, remove its volume and its row (archives are kept)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := client().Delete(cmd.Context(), args[0])
			return err
		},
	}
}

func newWSRecoverCmd(client func() *workspace.Client) *cobra.Command {
	return &cobra.Command{
		Use:   "recover ID",
		Short: "Clear a workspace's error (error info, count, operation) so it is reconciled again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := client().Recover(cmd.Context(), args[0])
			return err
		},
	}
}

func newWSWaitCmd(client func() *workspace.Client) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait ID STATUS",
		Short: "Wait until a workspace is observed in STATUS with no operation in flight (exit 1 on ERROR or timeout)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			want := workspace.Status(strings.ToUpper(args[1]))
			switch want {
			case workspace.Pending, workspace.Standby, workspace.Running, workspace.Error, workspace.Deleted:
			default:
				return fmt.Errorf("STATUS %q: want RUNNING, STANDBY, PENDING, ERROR or DELETED", args[1])
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			c := client()
			var last workspace.Workspace
			for {
				w, err := c.Get(ctx, args[0])
				var ae *workspace.APIError
				switch {
				case err == nil:
					last = w
					if w.ObservedStatus == want && (want == workspace.Error || w.Operation == workspace.OpNone) {
						return nil
					}
					if w.ObservedStatus == workspace.Error {
						reason := ""
						if w.ErrorInfo != nil {
							reason = w.ErrorInfo.Reason + ": " + w.ErrorInfo.LastError
						}
						return withCode(1, fmt.Errorf("workspace %s is in ERROR (%s)", w.ID, reason))
					}
				case errors.As(err, &ae) && ae.Status == 404 && want == workspace.Deleted:
					return nil
				case ctx.Err() == nil && !errors.As(err, &ae):
					// The server may be restarting: keep polling.
				case ctx.Err() == nil:
					return err
				}
				select {
				case <-ctx.Done():
					return withCode(1, fmt.Errorf("timed out after %v waiting for %s to be %s (last: observed %s, operation %s)", timeout, args[0], want, last.ObservedStatus, last.Operation))
				case <-time.After(100 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}

var _ provider.Container = (*fake.Provider)(nil)
