// Package cli turns command lines into calls on gantry's packages. It holds
// flags, argument checks and output formatting only; every behaviour lives in
// the subsystem packages (record, extsort, dsort, sched, taskq, workspace).
//
// Each command is a newXCmd that declares its flags into an options struct
// and a runX function that does the work, so the body of a command can be
// read (and called) apart from cobra. The files:
//
//	root.go         Execute, the root command (--log-level, --cpuprofile), gantry version
//	gensort.go      gantry gensort                      (record: generate gensort 1.5 records)
//	valsort.go      gantry valsort                      (record: validate records or summaries)
//	valsort_s3.go   s3:// arguments of gantry valsort and gensort: objects in a store
//	sort.go         gantry sort, gantry sort local      (extsort: sort on one machine)
//	dsort.go        gantry sort master|worker|status    (dsort: sort over many machines)
//	sched.go        gantry sched bench                  (sched: the scheduler's benchmark table)
//	queue.go        gantry queue worker|enqueue|stats|dlq|health (taskq)
//	queue_worker.go gantry queue worker: its flags, metrics server and Redis-lost exit
//	queue_tasks.go  gantry queue tasks list|get|delete|run|cancel, pause and resume
//	queue_cron.go   gantry queue cron add|list|remove
//	queue_workflow.go gantry queue workflow chain|chord|list|get|cancel
//	queue_limit.go  gantry queue limit set|list|clear (rate and concurrency limits)
//	queue_ui.go     gantry queue ui: the dashboard's HTTP server
//	otel.go         OpenTelemetry tracing of queue commands when OTEL_EXPORTER_OTLP_* is set
//	ws.go           gantry ws serve and the workspace client commands (workspace)
//	ws_spec.go      gantry ws create|update: the workspace spec flags
//	ws_exec.go      gantry ws exec (-i, -t)
//	ws_ssh.go       gantry ws ssh --stdio (OpenSSH's ProxyCommand), gantry ws config-ssh
//	ws_archives.go  gantry ws archives|restore|fork
//	ws_template.go  gantry ws template create|list|get|update|delete
//	ws_accounts.go  the ws client flags; gantry ws whoami|token|audit|logs
//	ws_kubernetes.go the Kubernetes provider's flags of ws serve, and gantry ws volume
//	ws_backends.go  the backends of ws serve: fs or S3 archive storage, the Docker
//	                provider, TTL and leader-lease settings
//	flags.go        shared flag parsing: -I DIR... expansion, sizes such as 256MiB
//	metrics.go      the /metrics (and /healthz) HTTP server of the daemons
//	completion.go   gantry completion bash|zsh|fish|powershell, and the dynamic
//	                completions: workspace ids and names, queue names
//
// The man pages (make man) are generated from Root by ../mangen.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// Env is what main hands to the CLI: the arguments, the output streams and
// the process-wide logger and metrics registry.
type Env struct {
	Args     []string
	Stdout   io.Writer
	Stderr   io.Writer
	Logger   *slog.Logger
	LogLevel *slog.LevelVar // set from --log-level; may be nil
	Registry *prometheus.Registry
	// ShutdownGrace, if set, is told how long the command may need to
	// drain after the first SIGINT/SIGTERM when that is longer than the
	// process allows by default (cmd/gantry: 15 s); the process then
	// waits that long before it exits on its own.
	ShutdownGrace func(time.Duration)
}

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withCode wraps err so that Execute exits with code.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// Execute runs the command line in env and returns the process exit status.
func Execute(ctx context.Context, env Env) int {
	if env.Logger == nil {
		env.Logger = slog.New(slog.DiscardHandler)
	}
	root := newRoot(&env)
	root.SetArgs(expandMultiValueFlags(env.Args))
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintf(env.Stderr, "gantry: %v\n", ee.err)
		}
		return ee.code
	}
	fmt.Fprintf(env.Stderr, "gantry: %v\n", err)
	if ctx.Err() != nil {
		return 130
	}
	return 1
}

// rootOptions are the flags every command takes, and the CPU profile they
// may have started.
type rootOptions struct {
	logLevel    string
	cpuProfile  string
	traceFile   string
	stopProfile []func() // set by before when --cpuprofile or --trace started one
}

// Root is gantry's command tree with the process's standard streams, for
// generators that walk it (cmd/gantry/internal/mangen: the man pages).
func Root() *cobra.Command {
	return newRoot(&Env{Stdout: os.Stdout, Stderr: os.Stderr})
}

func newRoot(env *Env) *cobra.Command {
	o := &rootOptions{}
	root := &cobra.Command{
		Use:           "gantry",
		Short:         "Run distributed work: external sort over gRPC, work-stealing scheduler",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return o.before(env)
		},
		PersistentPostRun: func(*cobra.Command, []string) { o.after() },
	}
	root.PersistentFlags().StringVar(&o.logLevel, "log-level", "info", "log level on stderr: debug, info, warn, error")
	root.PersistentFlags().StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the command to this file (for go tool pprof)")
	root.PersistentFlags().MarkHidden("cpuprofile")
	root.PersistentFlags().StringVar(&o.traceFile, "trace", "", "write an execution trace of the command to this file (for go tool trace)")
	root.PersistentFlags().MarkHidden("trace")
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(
		newVersionCmd(),
		newGensortCmd(env),
		newValsortCmd(env),
		newSortCmd(env),
		newSchedCmd(env),
		newQueueCmd(env),
		newWSCmd(env),
		newCompletionCmd(),
	)
	completeQueueFlags(root)
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every group command below the root (sched,
// queue, ws, …) fail on a word that is none of its subcommands, as the root
// does: cobra would print the group's help and exit 0, and a typo in a
// script would pass for success. With no word the group prints its help.
func refuseUnknownSubcommands(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.HasSubCommands() && sub.Run == nil && sub.RunE == nil {
				sub.Args = cobra.ArbitraryArgs
				sub.RunE = func(cmd *cobra.Command, args []string) error {
					if len(args) > 0 {
						return fmt.Errorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
					}
					return cmd.Help()
				}
			}
			walk(sub)
		}
	}
	walk(root)
}

// before runs ahead of every command: it starts the CPU profile and the
// execution trace and sets the log level.
func (o *rootOptions) before(env *Env) error {
	if err := o.startProfile("--cpuprofile", o.cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile); err != nil {
		return err
	}
	if err := o.startProfile("--trace", o.traceFile, trace.Start, trace.Stop); err != nil {
		o.after() // the CPU profile, if started: its file complete
		return err
	}
	if env.LogLevel == nil {
		return nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", o.logLevel)
	}
	env.LogLevel.Set(l)
	return nil
}

// startProfile starts a profile of the command into file (none when file
// is empty); after stops it.
func (o *rootOptions) startProfile(flag, file string, start func(io.Writer) error, stop func()) error {
	if file == "" {
		return nil
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	if err := start(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", flag, err)
	}
	o.stopProfile = append(o.stopProfile, func() { stop(); f.Close() })
	return nil
}

// after runs when a command succeeded: it stops the CPU profile and the
// execution trace.
func (o *rootOptions) after() {
	for _, stop := range o.stopProfile {
		stop()
	}
}

// Version is set at link time (-ldflags "-X .../internal/cli.Version=v1.2.3");
// otherwise the module version or VCS revision from the build info is used.
var Version = ""

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gantry's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			runVersion(cmd.OutOrStdout())
		},
	}
}

// runVersion is `gantry version`.
func runVersion(w io.Writer) {
	fmt.Fprintln(w, "gantry", versionString())
}

func versionString() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v + " " + bi.GoVersion
}
