package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/gantryhq/gantry/dsort"
	"github.com/gantryhq/gantry/internal/progress"
	"github.com/gantryhq/gantry/lifecycle"
)

// dsortExitDeadline is seed 003's watchdog: once a job has ended, the
// process exits within this time whatever is still running.
const dsortExitDeadline = 15 * time.Second

// watchdogDeadline is dsortExitDeadline, or the duration in
// GANTRY_DSORT_WATCHDOG when set: tests fire the watchdog without waiting
// 15 s (like GANTRY_DSORT_FAULT, it is for tests, not for users).
func watchdogDeadline() (time.Duration, error) {
	v := os.Getenv("GANTRY_DSORT_WATCHDOG")
	if v == "" {
		return dsortExitDeadline, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("GANTRY_DSORT_WATCHDOG=%q: want a positive duration such as 2s", v)
	}
	return d, nil
}

// testHooks sets, from the environment, the watchdog's deadline (returned)
// and the fault hook (GANTRY_DSORT_FAULT) of a master or worker.
func testHooks(stderr io.Writer, hook *func(context.Context, string)) (time.Duration, error) {
	if points := os.Getenv("GANTRY_DSORT_FAULT"); points != "" {
		*hook = faultHook(stderr, strings.Split(points, ","))
	}
	return watchdogDeadline()
}

// exitProcess is what the watchdog calls.
var exitProcess = os.Exit

// addDistributedSortCmds adds `sort master`, `sort worker`, `sort status`
// and `sort certs`.
func addDistributedSortCmds(parent *cobra.Command, env *Env) {
	parent.AddCommand(newSortMasterCmd(env), newSortWorkerCmd(env), newSortStatusCmd(env), newSortCertsCmd(env))
}

// addTLSFlags adds the job's mutual TLS flags (dsort.TLSFiles).
func addTLSFlags(f *pflag.FlagSet, t *dsort.TLSFiles) {
	f.StringVar(&t.Cert, "tls-cert", os.Getenv("GANTRY_TLS_CERT"), "this process's TLS certificate (PEM; with --tls-key and --tls-ca: mutual TLS; default $GANTRY_TLS_CERT)")
	f.StringVar(&t.Key, "tls-key", os.Getenv("GANTRY_TLS_KEY"), "the certificate's private key (default $GANTRY_TLS_KEY)")
	f.StringVar(&t.CA, "tls-ca", os.Getenv("GANTRY_TLS_CA"), "the job's CA: peers must show a certificate it signed (default $GANTRY_TLS_CA)")
}

func newSortCertsCmd(env *Env) *cobra.Command {
	var hosts []string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:   "certs DIR --hosts HOST,...",
		Short: "Make a CA and certificates for a distributed sort's mutual TLS",
		Long: `certs writes a new CA (ca.crt, ca.key) into DIR and, for each host, HOST.crt and
HOST.key: a certificate for serving at that IP address or DNS name and for
dialing the job's other processes; plus client.crt and client.key for
gantry sort status. Give every process --tls-ca DIR/ca.crt and its own
certificate and key; a peer without a certificate the CA signed is refused
at the handshake. Keys are ECDSA P-256, readable by the owner only. Files
are never overwritten: if any exists, nothing is written.`,
		Example: `  gantry sort certs tls --hosts 10.0.0.1,10.0.0.2,10.0.0.3
  gantry sort master 2 --bind 10.0.0.1 --tls-cert tls/10.0.0.1.crt --tls-key tls/10.0.0.1.key --tls-ca tls/ca.crt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			paths, err := dsort.MakeCerts(args[0], hosts, validity)
			if err != nil {
				return fmt.Errorf("sort certs: %w", err)
			}
			for _, p := range paths {
				fmt.Fprintln(env.Stdout, p)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "the IP addresses or DNS names the master and workers listen on (comma-separated)")
	cmd.Flags().DurationVar(&validity, "valid-for", 365*24*time.Hour, "how long the certificates are valid")
	return cmd
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// armWatchdog returns a function that starts seed 003's watchdog (once):
// deadline (dsortExitDeadline) after the shutdown began, the process says
// "[Worker] Shutdown timeout - forcing exit" (or [Master]) and exits
// whatever is still running, with status 0 if the job had succeeded (its
// output is complete) and 1 otherwise. The seed exits 0 in both cases; a
// supervisor or script must not take an aborted job for a success
// (dsort/README.md).
func armWatchdog(stderr io.Writer, what string, deadline time.Duration) func(succeeded bool) {
	var once sync.Once
	return func(succeeded bool) {
		once.Do(func() {
			lifecycle.StartWatchdog(deadline, func() {
				code := 1
				if succeeded {
					code = 0
				}
				fmt.Fprintf(stderr, "[%s] Shutdown timeout - forcing exit: still shutting down %s after the job ended (exit %d)\n",
					what, deadline, code)
				exitProcess(code)
			})
		})
	}
}

// sortMasterOptions are `sort master`'s flags.
type sortMasterOptions struct {
	format      formatFlags
	port        int
	bind        string
	metricsAddr string
	cfg         dsort.MasterConfig
}

func newSortMasterCmd(env *Env) *cobra.Command {
	var o sortMasterOptions
	cmd := &cobra.Command{
		Use:   "master N",
		Short: "Coordinate a distributed sort over N workers",
		Long: `master waits for N workers (gantry sort worker), computes partition boundaries
from their samples, runs the shuffle and merge barriers and watches their
heartbeats. Its stdout is exactly two lines: IP:PORT as soon as it listens,
then the workers' IPs in worker order once all N have registered. Progress
and logs go to stderr. A worker that crashes may be restarted with the same
arguments and rejoins; one that stays away longer than --rejoin-timeout
aborts the job. The exit status is 0 only when the whole job succeeded.

With --format lines and GNU sort's keys (-k, -t, -b -d -f -i -n -r -s, as
sort local takes them) the job sorts text lines: the partitions in worker
order are LC_ALL=C sort's output for all the workers' files, worker 0's
first. Every worker must be given the same --format and keys; one with
others is refused when it registers.`,
		Example: `  gantry sort master 3 --bind 10.0.0.1 --port 30040
  GANTRY_TOKEN=s3cret gantry sort master 4 --rejoin-timeout 2m
  gantry sort master 4 --format lines -t , -k 2,2 -k 3,3nr`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lines, err := o.format.options(cmd, "sort master")
			if err != nil {
				return err
			}
			o.cfg.Lines = lines
			return runSortMaster(cmd, env, o, args[0])
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.port, "port", 0, "TCP port to listen on (0: any free port)")
	f.StringVar(&o.bind, "bind", "127.0.0.1", "IP to listen on and print (the address workers dial; 0.0.0.0: every interface)")
	f.StringVar(&o.cfg.Token, "token", os.Getenv("GANTRY_TOKEN"), "shared secret every RPC must carry (default $GANTRY_TOKEN)")
	f.DurationVar(&o.cfg.RejoinTimeout, "rejoin-timeout", 60*time.Second, "abort the job when a worker stays silent this long")
	f.StringVar(&o.cfg.StateFile, "state", "", "save the job's state to FILE at each transition and resume the job saved there (restart with the same --state and --port)")
	f.DurationVar(&o.cfg.RegisterTimeout, "register-timeout", 2*time.Minute, "abort the job, naming the missing workers, when not all N have registered by then")
	f.DurationVar(&o.cfg.HeartbeatInterval, "heartbeat", 500*time.Millisecond, "how often workers report")
	f.Var(sizeValue{&o.cfg.PartitionSize}, "partition-size", "target partition size (default 64MiB; at least one partition per core)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9090; default: off)")
	addTLSFlags(f, &o.cfg.TLS)
	o.format.addFlags(f)
	return cmd
}

// runSortMaster is `sort master N`: it checks the flags, then runs the
// job (runMasterJob) with metrics served while it runs.
func runSortMaster(cmd *cobra.Command, env *Env, o sortMasterOptions, workers string) error {
	n, err := strconv.Atoi(workers)
	if err != nil || n < 1 {
		return fmt.Errorf("sort master: N must be a positive number of workers, got %q", workers)
	}
	if o.port < 0 || o.port > 65535 {
		return fmt.Errorf("sort master: --port %d is not a TCP port", o.port)
	}
	if net.ParseIP(o.bind) == nil {
		return fmt.Errorf("sort master: --bind %q is not an IP address (e.g. 127.0.0.1, 10.0.0.1 or 0.0.0.0 for every interface)", o.bind)
	}
	cfg := o.cfg
	cfg.Workers = n
	cfg.Addr = net.JoinHostPort(o.bind, strconv.Itoa(o.port))
	cfg.Logger = env.Logger
	// On a terminal the redrawn bars replace the info log, which
	// would scroll them away; --log-level still wins when given.
	if f := cmd.Flag("log-level"); isTerminal(env.Stderr) && env.LogLevel != nil && f != nil && !f.Changed {
		env.LogLevel.Set(slog.LevelWarn)
	}
	cfg.Metrics = env.registerer()
	deadline, err := testHooks(env.Stderr, &cfg.FaultHook)
	if err != nil {
		return fmt.Errorf("sort master: %w", err)
	}
	stopMetrics, err := serveMetrics(env, o.metricsAddr)
	if err != nil {
		return fmt.Errorf("sort master: %w", err)
	}
	defer stopMetrics()
	return runMasterJob(cmd.Context(), env, cfg, deadline)
}

// runMasterJob runs the master until the job ends: the two stdout lines,
// the workers' progress on stderr, the watchdog, the closing summary.
func runMasterJob(ctx context.Context, env *Env, cfg dsort.MasterConfig, deadline time.Duration) error {
	stdout, stderr := env.Stdout, env.Stderr
	start := time.Now()
	view := newClusterView(stderr, isTerminal(stderr))
	cfg.OnListen = func(addr string) { fmt.Fprintln(stdout, addr) }
	cfg.OnRegistered = func(ips []string) {
		fmt.Fprintln(stdout, strings.Join(ips, ", "))
		fmt.Fprintf(stderr, "all %d workers registered: %s\n", len(ips), strings.Join(ips, ", "))
	}
	cfg.OnChange = view.change
	cfg.OnShutdown = armWatchdog(stderr, "Master", deadline)
	m, err := dsort.NewMaster(cfg)
	if err != nil {
		return err
	}
	stopView := view.start(m.Status)
	err = m.Run(ctx)
	stopView()
	workers := m.Status()
	if err != nil {
		return withCode(1, fmt.Errorf("sort master: %w", err))
	}
	el := time.Since(start)
	fmt.Fprintf(stderr, "job succeeded in %s: %s sorted (%.1f MB/s)\n", el.Round(time.Millisecond),
		progress.FormatBytes(m.InputBytes()), float64(m.InputBytes())/1e6/el.Seconds())
	writePhaseTable(stderr, workers)
	return nil
}

// clusterView shows the workers' progress on stderr: a redrawn block of
// bars on a terminal, a line per state change otherwise.
type clusterView struct {
	w   io.Writer
	tty bool

	mu    sync.Mutex // protects lines
	lines int        // lines drawn by the last redraw
}

func newClusterView(w io.Writer, tty bool) *clusterView { return &clusterView{w: w, tty: tty} }

func (v *clusterView) change(wi dsort.WorkerInfo) {
	if v.tty {
		return
	}
	fmt.Fprintf(v.w, "worker %d %s: %s (%.0f%%)\n", wi.Index, wi.Address, wi.State, wi.Progress)
}

func (v *clusterView) start(status func() []dsort.WorkerInfo) (stop func()) {
	if !v.tty {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				v.draw(nil)
				return
			case <-t.C:
				v.draw(status())
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-exited }) }
}

func (v *clusterView) draw(ws []dsort.WorkerInfo) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b strings.Builder
	if v.lines > 0 {
		fmt.Fprintf(&b, "\033[%dA", v.lines)
	}
	for _, wi := range ws {
		const width = 30
		fill := int(wi.Progress / 100 * width)
		fill = min(max(fill, 0), width)
		alive := ""
		if !wi.Alive {
			alive = " (lost)"
		}
		fmt.Fprintf(&b, "\r\033[Kworker %d %-21s [%s%s] %5.1f%% %s%s\n", wi.Index, wi.Address,
			strings.Repeat("=", fill), strings.Repeat(" ", width-fill), wi.Progress, wi.State, alive)
	}
	for i := len(ws); i < v.lines; i++ {
		b.WriteString("\r\033[K\n")
	}
	if len(ws) < v.lines {
		fmt.Fprintf(&b, "\033[%dA", v.lines-len(ws))
	}
	v.lines = len(ws)
	io.WriteString(v.w, b.String())
}

// writePhaseTable prints seed 000 §9's phase durations, one row per worker.
func writePhaseTable(w io.Writer, workers []dsort.WorkerInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tADDRESS\tSTATE\tPHASE\tPROGRESS\tSAMPLING\tSORTING\tSHUFFLING\tMERGING")
	for _, wi := range workers {
		cols := map[dsort.State]string{}
		for _, p := range wi.Phases {
			d := fmt.Sprintf("%.2fs", p.Duration.Seconds())
			if !p.Done {
				d += "…"
			}
			cols[p.State] = d
		}
		get := func(s dsort.State) string {
			if c, ok := cols[s]; ok {
				return c
			}
			return "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.1f%%\t%s\t%s\t%s\t%s\n", wi.Index, wi.Address, wi.State, wi.State.Phase(), wi.Progress,
			get(dsort.Sampling), get(dsort.Sorting), get(dsort.Shuffling), get(dsort.Merging))
	}
	tw.Flush()
}

// sortWorkerOptions are `sort worker`'s flags.
type sortWorkerOptions struct {
	format      formatFlags
	cfg         dsort.WorkerConfig
	metricsAddr string
}

func newSortWorkerCmd(env *Env) *cobra.Command {
	var o sortWorkerOptions
	cmd := &cobra.Command{
		Use:   "worker MASTER_IP:PORT -I DIR... -O DIR",
		Short: "Sort this machine's share of a distributed sort",
		Long: `worker registers with the master, samples and sorts the records under the input
directories (read-only; any number of files of any size, ASCII or binary
gensort records, or text lines with the master's --format lines and keys), exchanges partitions with the other workers and writes
partition.<n> files into the output directory, which holds nothing else
when the job is done but a .gantry-sort-done marker naming the job. It
touches the output only once the master accepted it, and replaces earlier
partitions only when the job has succeeded; -I, -O and --tmp must not
overlap. Restarted with the same arguments after a crash (even with its
temp dir wiped) it rejoins the job; restarted after the job succeeded it
leaves the output as it is: with the same inputs and no master listening,
it says "already completed" and exits 0 at once (--rerun joins a job
anyway). On the master's shutdown signal it stops in bounded steps and
exits within 15 s whatever hangs.

S3: an -I s3://bucket/prefix?endpoint=http://host:port stands for every
object under the prefix, downloaded into the temp dir before sampling; with
--share K/N, N workers given the same -I divide its objects by bytes (a
large object between several). An -O s3://… prefix (one per worker) gets
each partition as a multipart upload of partition.<n> left pending as soon
as it is merged; when the job succeeds the uploads are completed and the
marker written last: no partial partition is ever visible, and a failed job
aborts them and leaves the previous output whole. A commit cut short is
finished by running the worker again with the same arguments. Credentials come from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY; a wrong one or a missing bucket fails at start.`,
		Example: `  gantry sort worker 10.0.0.1:30040 -I /data/in1 /data/in2 -O /data/out
  gantry sort worker 127.0.0.1:30040 -I in -O out --bind 127.0.0.2 --memory 512MiB
  gantry sort worker 10.0.0.1:30040 --format lines -t , -k 2,2 -k 3,3nr -I /data/logs -O /data/sorted
  gantry sort worker 10.0.0.1:30040 --share 1/4 -I 's3://data/in?endpoint=http://10.0.0.9:9000' -O 's3://data/out/w1?endpoint=http://10.0.0.9:9000'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lines, err := o.format.options(cmd, "sort worker")
			if err != nil {
				return err
			}
			o.cfg.Lines = lines
			return runSortWorker(cmd.Context(), env, o, args[0])
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.cfg.Inputs, "input", "I", nil, "input directories or s3://bucket/prefix?endpoint=URL prefixes (several may follow one -I)")
	f.StringVarP(&o.cfg.Output, "output", "O", "", "output directory, or an s3://bucket/prefix?endpoint=URL prefix of this worker's own")
	f.Var(shareValue{&o.cfg.Share}, "share", "K/N: sort only the K-th of N equal byte ranges of the S3 inputs (give N workers the same -I and 0/N … N-1/N)")
	f.StringVar(&o.cfg.TempDir, "tmp", "", "directory for temporary files (default $TMPDIR or /tmp)")
	f.Var(sizeValue{&o.cfg.Memory}, "memory", "memory budget for sorting and merging (default: a quarter of RAM, shared by the job's workers on this machine)")
	f.StringVar(&o.cfg.Bind, "bind", "", "IP to listen on and advertise (default: the interface that reaches the master)")
	f.IntVar(&o.cfg.Port, "port", 0, "TCP port to listen on (0: any free port)")
	f.StringVar(&o.cfg.Token, "token", os.Getenv("GANTRY_TOKEN"), "shared secret every RPC must carry (default $GANTRY_TOKEN)")
	f.DurationVar(&o.cfg.RegisterTimeout, "register-timeout", 30*time.Second, "how long to keep trying to reach the master at start (the output dir is left as it was)")
	f.BoolVar(&o.cfg.Rerun, "rerun", false, "join a job even when the output holds the completed result of these inputs (default: then exit 0 at once, nothing to do, unless a master listens at its address within 1s)")
	f.DurationVar(&o.cfg.MasterTimeout, "master-timeout", 30*time.Second, "give up when the master stays unreachable this long")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9091; default: off)")
	addTLSFlags(f, &o.cfg.TLS)
	o.format.addFlags(f)
	return cmd
}

// runSortWorker is `sort worker MASTER`: it runs the worker until the job
// ends, then prints its state history and phase durations on stderr.
func runSortWorker(ctx context.Context, env *Env, o sortWorkerOptions, master string) error {
	cfg := o.cfg
	cfg.Master = master
	cfg.Logger = env.Logger
	stderr := env.Stderr
	cfg.OnTransition = func(t lifecycle.Transition[dsort.State]) {
		fmt.Fprintf(stderr, "worker: %s -> %s: %s\n", t.From, t.To, t.Reason)
	}
	deadline, err := testHooks(stderr, &cfg.FaultHook)
	if err != nil {
		return fmt.Errorf("sort worker: %w", err)
	}
	cfg.OnShutdown = armWatchdog(stderr, "Worker", deadline)
	cfg.LimitGoMemory = true // this process runs one worker
	cfg.ShareCores = true
	cfg.Metrics = env.registerer()
	w, err := dsort.NewWorker(cfg)
	if err != nil {
		return fmt.Errorf("sort worker: %w", err)
	}
	stopMetrics, err := serveMetrics(env, o.metricsAddr)
	if err != nil {
		return fmt.Errorf("sort worker: %w", err)
	}
	defer stopMetrics()
	err = w.Run(ctx)
	if sm := w.StateMachine(); sm != nil && len(sm.History()) > 0 {
		fmt.Fprintln(stderr, "=== State Transition History ===")
		sm.WriteHistory(stderr)
		fmt.Fprintln(stderr, "=== Phase Durations ===")
		sm.WritePhases(stderr)
	}
	if err != nil {
		return withCode(1, fmt.Errorf("sort worker: %w", err))
	}
	if job := w.AlreadyCompleted(); job != "" {
		fmt.Fprintf(stderr, "worker: already completed, nothing to do: %s holds job %s's committed output of these inputs and no master listens at %s (--rerun to sort again)\n",
			cfg.Output, job, cfg.Master)
		return nil
	}
	fmt.Fprintln(stderr, "worker: the job succeeded")
	return nil
}

// faultHook is for fault-injection tests (GANTRY_DSORT_FAULT=point,...):
// at each listed point the master or worker says so on stderr and stops there until
// it is killed, its context ends or, when GANTRY_DSORT_FAULT_UNTIL names a
// file, that file exists.
func faultHook(stderr io.Writer, points []string) func(context.Context, string) {
	until := os.Getenv("GANTRY_DSORT_FAULT_UNTIL")
	return func(ctx context.Context, point string) {
		if !slices.Contains(points, point) {
			return
		}
		fmt.Fprintf(stderr, "fault point %s reached\n", point)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := os.Stat(until); until != "" && err == nil {
					fmt.Fprintf(stderr, "fault point %s released\n", point)
					return
				}
			}
		}
	}
}

func newSortStatusCmd(env *Env) *cobra.Command {
	var token string
	var tlsFiles dsort.TLSFiles
	cmd := &cobra.Command{
		Use:     "status MASTER_IP:PORT",
		Short:   "Show each worker's state, phase, progress and phase durations",
		Example: `  gantry sort status 10.0.0.1:30040`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSortStatus(cmd.Context(), env, args[0], token, tlsFiles)
		},
	}
	cmd.Flags().StringVar(&token, "token", os.Getenv("GANTRY_TOKEN"), "shared secret (default $GANTRY_TOKEN)")
	addTLSFlags(cmd.Flags(), &tlsFiles)
	return cmd
}

// runSortStatus is `sort status MASTER`: the job's phase and a row per
// worker, from the master's GetJobStatus.
func runSortStatus(ctx context.Context, env *Env, master, token string, tlsFiles dsort.TLSFiles) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	js, err := dsort.JobStatus(ctx, master, token, tlsFiles)
	if err != nil {
		return fmt.Errorf("sort status: %w", err)
	}
	out := env.Stdout
	fmt.Fprintf(out, "job %s: %s, %d/%d workers registered, %s elapsed\n", js.JobID, js.Phase,
		js.Registered, js.Workers, js.Elapsed.Round(100*time.Millisecond))
	if r := js.AbortReason; r != "" {
		fmt.Fprintf(out, "aborted: %s\n", r)
	}
	writePhaseTable(out, js.Members)
	return nil
}

// shareValue is --share K/N.
type shareValue struct{ s *dsort.Share }

func (v shareValue) String() string {
	if v.s == nil {
		return ""
	}
	return v.s.String()
}

func (v shareValue) Set(s string) error {
	sh, err := dsort.ParseShare(s)
	if err != nil {
		return err
	}
	*v.s = sh
	return nil
}

func (shareValue) Type() string { return "K/N" }
