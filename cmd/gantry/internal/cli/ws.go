package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/workspace"
	wsclient "github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/reconcile"
	"github.com/gantryhq/gantry/workspace/server"
	"github.com/gantryhq/gantry/workspace/singletons"
)

const defaultWSServer = "http://127.0.0.1:7480"

func newWSCmd(env *Env) *cobra.Command {
	var cf wsClientFlags
	cmd := &cobra.Command{
		Use:   "ws",
		Short: "Workspaces: a level-triggered reconciler (serve) and its client commands",
	}
	cf.register(cmd.PersistentFlags())
	client := cf.client
	cmd.AddCommand(newWSServeCmd(env), newWSCreateCmd(client), newWSListCmd(client), newWSGetCmd(client),
		newWSDesiredCmd(client, "up", workspace.Running, "Bring a workspace up (desired RUNNING)"),
		newWSDesiredCmd(client, "down", workspace.Standby, "Stop a workspace, keep its volume (desired STANDBY)"),
		newWSDesiredCmd(client, "archive", workspace.Pending, "Archive a workspace and remove its volume (desired PENDING)"),
		newWSDeleteCmd(client), newWSRecoverCmd(client), newWSWaitCmd(client), newWSTouchCmd(client),
		newWSTokenCmd(client), newWSAuditCmd(client), newWSWhoamiCmd(client), newWSLogsCmd(client), newWSExecCmd(client), newWSSSHCmd(client), newWSConfigSSHCmd(&cf),
		newWSUpdateCmd(client), newWSArchivesCmd(client), newWSRestoreCmd(client), newWSVolumeCmd(env),
		newWSTemplateCmd(client), newWSForkCmd(client))
	completeWorkspaceArgs(cmd, client)
	return cmd
}

// wsServeOptions are `gantry ws serve`'s flags.
type wsServeOptions struct {
	cfg         server.ServerConfig
	prov        string
	fakeLatency time.Duration
	interval    time.Duration
	backoff     time.Duration
	lease       time.Duration
	monInterval time.Duration
	crashWindow time.Duration
	maxRetries  int
	timeouts    map[workspace.Operation]*time.Duration
	backends    wsBackendFlags
}

func newWSServeCmd(env *Env) *cobra.Command {
	o := &wsServeOptions{timeouts: map[workspace.Operation]*time.Duration{}}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the API, web page, reconciler, health monitor and TTL manager (SQLite under --data by default)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runWSServe(cmd, env, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.cfg.DB, "db", "", "database: sqlite:PATH or postgres://… (default sqlite:<data>/workspaces.db)")
	f.StringVar(&o.cfg.Data, "data", "gantry-ws-data", "directory for the database, volumes, archives and pidfiles")
	f.StringVar(&o.cfg.Listen, "listen", "127.0.0.1:7480", "API address (not loopback: needs --tls-cert/--tls-key or --insecure-listen)")
	f.StringVar(&o.cfg.AppsDomain, "apps-domain", "", "serve each workspace's app at {name}--{owner}.DOMAIN on --listen's port (default localhost on a loopback --listen)")
	f.StringVar(&o.cfg.TLSCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain)")
	f.StringVar(&o.cfg.TLSKey, "tls-key", "", "the PEM private key of --tls-cert")
	f.BoolVar(&o.cfg.InsecureListen, "insecure-listen", false, "allow plain HTTP on a non-loopback --listen (a TLS-terminating proxy is in front)")
	f.DurationVar(&o.cfg.ReadTimeout, "read-timeout", server.DefaultReadTimeout, "bound on reading a whole request, body included, but a stream's (proxy, exec, logs -f, events) (negative = none)")
	f.DurationVar(&o.cfg.WriteTimeout, "write-timeout", server.DefaultWriteTimeout, "bound on writing an answer but a stream's (negative = none)")
	f.DurationVar(&o.cfg.IdleTimeout, "idle-conn-timeout", server.DefaultIdleTimeout, "close a keep-alive connection idle this long (negative = never)")
	f.IntVar(&o.cfg.MaxConns, "max-conns", 0, fmt.Sprintf("open API connections at most; more get 503 (0 = %d, or half the fd limit if less; negative = no limit)", server.DefaultMaxConns))
	f.IntVar(&o.cfg.MaxConnsPerAddr, "max-conns-per-addr", server.DefaultMaxConnsPerAddr, "open API connections at most from one IP address, loopback too; more get 503 (negative = no limit)")
	f.IntVar(&o.cfg.Quotas.Running, "quota-running", 0, "per owner: workspaces RUNNING or on their way there (0 = no limit)")
	f.IntVar(&o.cfg.Quotas.Workspaces, "quota-workspaces", 0, "per owner: workspaces in any state (0 = no limit)")
	f.DurationVar(&o.cfg.AuditRetention, "audit-retention", singletons.DefaultAuditRetention, "keep audit rows this long (negative = forever)")
	f.IntVar(&o.cfg.Archives.Keep, "keep-archives", singletons.DefaultKeepArchives, "archives kept per workspace, newest first, besides the one its next restore uses (0 = every archive)")
	f.DurationVar(&o.cfg.Archives.Retention, "archive-retention", singletons.DefaultArchiveRetention, "a deleted workspace's archives are removed this long after (negative = never)")
	f.DurationVar(&o.cfg.Archives.Interval, "archive-gc-interval", 5*time.Minute, "time between the archive GC's passes (on the leader)")
	f.DurationVar(&o.cfg.PoolInterval, "pool-interval", 500*time.Millisecond, "time between the leader's refills of the templates' warm pools")
	f.StringVar(&o.cfg.Redis, "redis", "", "Redis URL for hints (redis://127.0.0.1:6379/0); default: in-process or Postgres NOTIFY")
	o.backends.register(f) // --storage, --docker-image
	f.StringVar(&o.prov, "provider", "process", "providers: process (+ fs volumes/archives), docker, kubernetes (pods and claims; --kubeconfig, --namespace, --storage-class, --job-image) or fake (tests, benchmarks)")
	f.DurationVar(&o.fakeLatency, "fake-latency", 10*time.Millisecond, "latency of each fake provider call")
	f.DurationVar(&o.interval, "interval", 10*time.Second, "reconcile interval (overrides RECONCILER_INTERVAL)")
	f.IntVar(&o.maxRetries, "max-retries", 3, "retries after a failed provider call (overrides RECONCILER_MAX_RETRIES)")
	f.DurationVar(&o.backoff, "retry-backoff", 30*time.Second, "first retry delay, doubled per retry (overrides RECONCILER_RETRY_BACKOFF)")
	f.DurationVar(&o.lease, "op-lease", 15*time.Second, "how long a claimed operation survives a dead replica before another takes it over")
	f.DurationVar(&o.monInterval, "monitor-interval", 30*time.Second, "health monitor interval")
	f.DurationVar(&o.crashWindow, "crash-window", 10*time.Minute, "a command that ends within this long of its previous end is crash-looping: each end is a failed attempt (backoff, ERROR after --max-retries)")
	for op, def := range map[workspace.Operation]time.Duration{workspace.OpStarting: 300 * time.Second, workspace.OpStopping: 300 * time.Second, workspace.OpArchiving: 1800 * time.Second, workspace.OpRestoring: 1800 * time.Second} {
		d := new(time.Duration)
		o.timeouts[op] = d
		f.DurationVar(d, strings.ToLower(string(op))+"-timeout", def, fmt.Sprintf("%s timeout (overrides RECONCILER_%s_TIMEOUT)", op, op))
	}
	return cmd
}

// runWSServe builds the server from the flags (over the RECONCILER_* env)
// and serves until the command's context ends.
func runWSServe(cmd *cobra.Command, env *Env, o *wsServeOptions) error {
	rc, err := o.reconcilerConfig(cmd.Flags())
	if err != nil {
		return err
	}
	if err := checkConnFlags(cmd.Flags()); err != nil {
		return err
	}
	if err := checkCountFlags(cmd.Flags()); err != nil {
		return err
	}
	cfg := o.cfg
	cfg.Reconciler = rc
	cfg.Monitor.Interval = o.monInterval
	if cfg.Archives.Keep == 0 {
		cfg.Archives.Keep = -1 // --keep-archives 0: every archive
	}
	switch o.prov {
	case "process":
	case "fake":
		fk := fake.New(o.fakeLatency)
		cfg.Container, cfg.Storage = fk, fk
	case "docker", "kubernetes": // the providers come from backends.apply
	default:
		return fmt.Errorf("--provider %q: want process, docker, kubernetes or fake", o.prov)
	}
	if err := o.backends.apply(cmd.Context(), &cfg, o.prov, env.Logger); err != nil { // docker, --storage s3://…
		return err
	}
	if err := o.backends.singletons(&cfg); err != nil { // TTL manager, leader lease
		return err
	}
	cfg.Logger = env.Logger
	cfg.Registry = env.registerer()
	cfg.Page = livePage(env) // page, SSE, metrics, probes
	srv, err := server.NewServer(cmd.Context(), cfg)
	if err != nil {
		return flagError(err)
	}
	return flagError(srv.Run(cmd.Context()))
}

// checkConnFlags refuses a connection timeout of zero, which the server
// would read as its default: none is a negative one.
func checkConnFlags(f *pflag.FlagSet) error {
	for _, name := range []string{"read-timeout", "write-timeout", "idle-conn-timeout"} {
		if d, err := f.GetDuration(name); err == nil && f.Changed(name) && d == 0 {
			return fmt.Errorf("--%s 0s: want a positive duration (negative = none)", name)
		}
	}
	return nil
}

// checkCountFlags refuses a negative count or limit, which the server would
// otherwise read as none, 0 or its default without a word.
func checkCountFlags(f *pflag.FlagSet) error {
	for _, name := range []string{"quota-running", "quota-workspaces", "keep-archives", "max-retries", "default-pids", "default-cpus"} {
		fl := f.Lookup(name)
		if fl == nil {
			continue
		}
		if v, err := strconv.ParseFloat(fl.Value.String(), 64); err == nil && v < 0 {
			return fmt.Errorf("--%s %s: want 0 or more (%s)", name, fl.Value, fl.Usage)
		}
	}
	return nil
}

// serveFlags names the flag of each ServerConfig field a server.ConfigError
// can name.
var serveFlags = map[string]string{"Data": "--data", "DB": "--db", "Listen": "--listen", "TLSCert": "--tls-cert/--tls-key",
	"Redis": "--redis", "Container": "--provider", "Storage": "--storage", "Page": "the page", "InsecureSharedUser": "--insecure-shared-user"}

// flagError says a server.ConfigError in the flag's name the user typed.
func flagError(err error) error {
	var ce *server.ConfigError
	if errors.As(err, &ce) {
		if flag, ok := serveFlags[ce.Field]; ok {
			return fmt.Errorf("%s: %w", flag, ce.Err)
		}
	}
	return err
}

// reconcilerConfig is RECONCILER_* from the environment, overridden by the
// flags the user gave.
func (o *wsServeOptions) reconcilerConfig(f *pflag.FlagSet) (reconcile.Config, error) {
	rc, err := reconcile.ConfigFromEnv(os.Getenv)
	if err != nil {
		return rc, err
	}
	for name, d := range map[string]time.Duration{"interval": o.interval, "retry-backoff": o.backoff, "op-lease": o.lease, "monitor-interval": o.monInterval,
		"crash-window": o.crashWindow, "pool-interval": o.cfg.PoolInterval} {
		if f.Changed(name) && d <= 0 {
			return rc, fmt.Errorf("--%s %v: want a positive duration", name, d)
		}
	}
	if f.Changed("interval") {
		rc.Interval = o.interval
	}
	if f.Changed("retry-backoff") {
		rc.RetryBackoff = o.backoff
	}
	rc.CrashWindow = o.crashWindow
	if f.Changed("max-retries") {
		rc.MaxRetries = o.maxRetries
		if o.maxRetries == 0 {
			rc.MaxRetries = -1
		}
	}
	for op, d := range o.timeouts {
		if name := strings.ToLower(string(op)) + "-timeout"; f.Changed(name) {
			if *d <= 0 {
				return rc, fmt.Errorf("--%s %v: want a positive duration", name, *d)
			}
			rc.Timeouts[op] = *d
		}
	}
	rc.Lease = o.lease
	return rc, nil
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newWSListCmd(client func() *wsclient.Client) *cobra.Command {
	var asJSON bool
	var owner string
	var pool bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workspaces",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := client().List(cmd.Context())
			switch {
			case owner != "":
				ws, err = client().ListOwned(cmd.Context(), owner)
			case pool:
				ws, err = client().PoolMembers(cmd.Context())
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, ws)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tOWNER\tDESIRED\tOBSERVED\tOPERATION\tTEMPLATE\tERROR")
			for _, w := range ws {
				e := ""
				if w.ErrorInfo != nil {
					e = w.ErrorInfo.Reason
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.Name, w.Owner, w.DesiredState, w.ObservedStatus, w.Operation, templateColumn(w), e)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&owner, "owner", "", "only this owner's workspaces (another owner's: admin token)")
	cmd.Flags().BoolVar(&pool, "pool", false, "the warm pools' unclaimed members instead (admin token)")
	return cmd
}

func newWSGetCmd(client func() *wsclient.Client) *cobra.Command {
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
			fmt.Fprintf(out, "id:              %s\nname:            %s\nowner:           %s\ndesired_state:   %s\nobserved_status: %s\noperation:       %s\narchive_key:     %s\nvolume:          %s\n",
				w.ID, w.Name, w.Owner, w.DesiredState, w.ObservedStatus, w.Operation, w.ArchiveKey, w.Volume)
			if w.RestartPending {
				fmt.Fprintf(out, "restart:         pending (its command restarts with its new environment)\n")
			}
			if w.URL != "" {
				fmt.Fprintf(out, "url:             %s\n", w.URL)
			}
			printApps(out, w.Apps)
			if w.Spec.Template != nil {
				fmt.Fprintf(out, "template:        %s\n", templateColumn(w))
			}
			if w.ErrorInfo != nil {
				fmt.Fprintf(out, "error:           %s (%s, terminal=%v): %s\n", w.ErrorInfo.Reason, w.ErrorInfo.Operation, w.ErrorInfo.IsTerminal, w.ErrorInfo.LastError)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// idCmd is a command on one id (a workspace's id or name, or a token id)
// that prints nothing on success.
func idCmd(use, short string, run func(ctx context.Context, id string) error) *cobra.Command {
	return &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return run(cmd.Context(), args[0]) },
	}
}

func newWSDesiredCmd(client func() *wsclient.Client, use string, st workspace.Status, short string) *cobra.Command {
	return idCmd(use, short, func(ctx context.Context, id string) error {
		_, err := client().SetDesired(ctx, id, st)
		return err
	})
}

func newWSDeleteCmd(client func() *wsclient.Client) *cobra.Command {
	return idCmd("delete", "Delete a workspace: stop it, remove its volume and its row (archives are kept)", func(ctx context.Context, id string) error {
		_, err := client().Delete(ctx, id)
		return err
	})
}

func newWSRecoverCmd(client func() *wsclient.Client) *cobra.Command {
	return idCmd("recover", "Clear a workspace's error (error info, count, operation) so it is reconciled again", func(ctx context.Context, id string) error {
		_, err := client().Recover(ctx, id)
		return err
	})
}

func newWSWaitCmd(client func() *wsclient.Client) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait ID STATUS",
		Short: "Wait until a workspace is observed in STATUS with no operation in flight (exit 1 on ERROR or timeout)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runWSWait(cmd.Context(), client(), args[0], args[1], timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}

// runWSWait polls id every 100 ms until it is observed in status (and no
// operation is in flight), it lands in ERROR, or timeout passes.
func runWSWait(ctx context.Context, c *wsclient.Client, id, status string, timeout time.Duration) error {
	want := workspace.Status(strings.ToUpper(status))
	switch want {
	case workspace.Pending, workspace.Standby, workspace.Running, workspace.Error, workspace.Deleted:
	default:
		return fmt.Errorf("STATUS %q: want RUNNING, STANDBY, PENDING, ERROR or DELETED", status)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last workspace.Workspace
	for {
		w, err := c.Get(ctx, id)
		if err == nil {
			last = w
		}
		if done, err := waitDone(ctx, w, err, want); done {
			return err
		}
		select {
		case <-ctx.Done():
			return withCode(1, fmt.Errorf("timed out after %v waiting for %s to be %s (last: observed %s, operation %s)", timeout, id, want, last.ObservedStatus, last.Operation))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitDone judges one poll of ws wait: reached, in ERROR, deleted as
// wanted, or a server error (a connection error keeps polling: the server
// may be restarting).
func waitDone(ctx context.Context, w workspace.Workspace, err error, want workspace.Status) (bool, error) {
	var ae *wsclient.APIError
	switch {
	case err == nil && w.ObservedStatus == want && (want == workspace.Error || w.Operation == workspace.OpNone && !w.RestartPending):
		return true, nil
	case err == nil && w.ObservedStatus == workspace.Error && w.ErrorInfo != nil:
		// (ERROR with no error info is a recovered workspace the monitor
		// has not observed again yet: keep waiting.)
		return true, withCode(1, fmt.Errorf("workspace %s is in ERROR (%s: %s)", w.ID, w.ErrorInfo.Reason, w.ErrorInfo.LastError))
	case err == nil:
		return false, nil
	case errors.As(err, &ae) && ae.Status == 404 && want == workspace.Deleted:
		return true, nil
	case ctx.Err() == nil && errors.As(err, &ae):
		return true, err
	}
	return false, nil
}

var _ provider.Container = (*fake.Provider)(nil)

// printApps lists a workspace's apps (main, the default one, if shared or
// with others): name, port, share level and URL.
func printApps(out io.Writer, apps []workspace.App) {
	if len(apps) == 1 && apps[0].Share == workspace.ShareOwner {
		return
	}
	for _, a := range apps {
		port := "$PORT"
		if a.Port != 0 {
			port = strconv.Itoa(a.Port)
		}
		fmt.Fprintf(out, "app %-12s port %-5s share %-13s %s\n", a.Name+":", port, a.Share, dash(a.URL))
	}
}
