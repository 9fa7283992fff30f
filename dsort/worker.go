package dsort

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/lifecycle"
	"github.com/gantryhq/gantry/linesort"
	"github.com/gantryhq/gantry/workspace/provider/s3"
)

// WorkerConfig configures a Worker. Zero values are the documented defaults.
type WorkerConfig struct {
	// Master is the master's IP:PORT. Required.
	Master string
	// Inputs are the input directories, read-only. Required (>= 1). An
	// s3://bucket/prefix?endpoint=… input stands for the objects under the
	// prefix (s3in.go); credentials come from AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY.
	Inputs []string
	// Share, when set, makes the worker sort only its share of its S3
	// inputs: N workers given the same -I and the shares 0/N … N-1/N
	// divide the objects between them by bytes.
	Share Share
	// Output is the output directory; when the job is done it holds only
	// partition.<n> files. Required. An s3://bucket/prefix?endpoint=…
	// output is a prefix of this worker's own (s3out.go).
	Output string
	// TempDir is where the worker keeps runs, received pieces and its state
	// file (in its own subdirectory). Default os.TempDir().
	TempDir string
	// Memory bounds the worker's sort and merge buffers. Default: a quarter
	// of RAM shared by the job's workers on this machine (the master tells
	// each worker how many there are before it sorts).
	Memory int64
	// Bind is the IP the worker listens on and advertises. Default: the
	// local address of the route to the master.
	Bind string
	// Port is the port to listen on. Default 0 (any).
	Port int
	// Token, when set, accompanies every RPC and is required of callers.
	Token string
	// TLS, when set, is the job's mutual TLS (MasterConfig.TLS).
	TLS TLSFiles
	// Lines, when set, makes the worker sort text lines ordered by these
	// options (--format lines), which must be the master's
	// (MasterConfig.Lines). Default: gensort records.
	Lines *linesort.Options
	// SampleSize is how many keys the worker samples. Default 10000.
	SampleSize int
	// RegisterTimeout is how long to keep trying to reach the master at
	// start. Default 30s.
	RegisterTimeout time.Duration
	// MasterTimeout is how long the master may stay unreachable before the
	// worker gives up. Default 30s.
	MasterTimeout time.Duration
	// LimitGoMemory sets the Go runtime's soft memory limit
	// (debug.SetMemoryLimit) from the worker's memory plan, so that the
	// heap collects before the process outgrows Memory. It is process-wide:
	// for a program that runs one worker (the CLI sets it); a limit set by
	// GOMEMLIMIT or the program is left alone.
	LimitGoMemory bool
	// ShareCores divides the machine's cores among the job's workers on it,
	// as a defaulted Memory is divided: a worker that shares its machine
	// with others of the job runs GOMAXPROCS/k goroutines at once (at least
	// one; k the job's workers there) and sizes its parallel streams and
	// merges by that, so that k workers do not run k times the machine's
	// cores and spend the difference switching between processes. It sets
	// runtime.GOMAXPROCS, so it is for a program that runs one worker (the
	// CLI sets it); a GOMAXPROCS set in the environment is left alone.
	ShareCores bool
	// Rerun makes the worker join a job even when its output holds the
	// completed result of its inputs and no master answers at once (by
	// default it then exits with nothing to do, seed 000 §8.1).
	Rerun bool
	// FetchParallel is how many shuffle streams the worker pulls at once.
	// Default 4.
	FetchParallel int
	// OnShutdown is called once, when the worker starts shutting down (the
	// master ended the job, this worker failed, or ctx ended), with whether
	// the job succeeded: the place for a caller to arm a hard-deadline
	// watchdog. Optional.
	OnShutdown func(succeeded bool)
	// FaultHook, when set, is called at named points so that tests can stop
	// a worker at a known place and kill it there: "Sampling" (sample taken,
	// not yet submitted), "Sorting" (runs spilled, not yet split),
	// "shuffle-piece" (after this worker's first piece is committed),
	// "serve-last-chunk" (a stream to a peer has sent all its data but not
	// its last chunk) and "merge-partition" (after the first partition.<n>
	// is written). It may block until ctx ends. Optional.
	FaultHook func(ctx context.Context, point string)
	// OnTransition is called after every state transition. Optional.
	OnTransition func(lifecycle.Transition[State])
	// Logger receives the worker's log. Default: discard.
	Logger *slog.Logger
	// Metrics, when set, receives dsort's metrics (see metrics.go).
	// Default: none.
	Metrics prometheus.Registerer
	// Clock times the heartbeats, the master timeout and the phases, and
	// dates the state history; RegisterTimeout and RPC deadlines stay on
	// the wall clock (gRPC's). Default: the real clock.
	Clock clock.Clock

	sharedMemory bool // Memory was defaulted: divide it among the machine's workers
}

// checkS3 checks the S3 inputs' and output's URLs (their stores are
// checked at start) and that a Share has S3 inputs to divide.
func (c *WorkerConfig) checkS3() error {
	hasS3 := false
	var seen []string // endpoint/bucket/prefix/ of each S3 -I and -O
	for i, p := range append(slices.Clone(c.Inputs), c.Output) {
		if !isS3(p) {
			continue
		}
		hasS3 = hasS3 || i < len(c.Inputs)
		where, err := s3Place(p)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		for _, o := range seen { // given twice, or one inside the other: records read twice, or the output read as input
			if s3Overlap(where, o) {
				return fmt.Errorf("%w: %s overlaps another S3 input or the output (the same prefix, or one inside the other)", ErrConfig, p)
			}
		}
		seen = append(seen, where)
	}
	if !c.Share.whole() && !hasS3 {
		return fmt.Errorf("%w: --share %s divides S3 inputs, and no -I is an s3:// URL", ErrConfig, c.Share)
	}
	if c.Share.Count > 0 && (c.Share.Index < 0 || c.Share.Index >= c.Share.Count) {
		return fmt.Errorf("%w: share %d/%d: want 0 <= K < N", ErrConfig, c.Share.Index, c.Share.Count)
	}
	return nil
}

// s3Place is where an s3:// URL points, as endpoint/bucket/prefix/: two
// URLs overlap when one's place starts with the other's (a bucket's root
// holds every prefix of it).
func s3Place(p string) (string, error) {
	cfg, err := s3.ParseURL(p)
	if err != nil {
		return "", err
	}
	where := cfg.Endpoint + "/" + cfg.Bucket + "/"
	if prefix := strings.Trim(cfg.Prefix, "/"); prefix != "" {
		where += prefix + "/"
	}
	return where, nil
}

// s3Overlap reports whether two s3Places are one, or one is inside the
// other.
func s3Overlap(a, b string) bool {
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

// checkPaths checks the S3 URLs and, before anything is touched, that no
// output or temp dir is inside an input (or the reverse): this worker
// would delete or read its own files.
func (c *WorkerConfig) checkPaths() error {
	if err := c.checkS3(); err != nil {
		return err
	}
	local := slices.DeleteFunc(slices.Clone(c.Inputs), isS3)
	out := c.Output
	if isS3(out) {
		out = filepath.Join(c.TempDir, workDirPrefix+"s3out") // the local staging dir's place
	}
	if err := extsort.CheckSeparate(local, out, c.TempDir); err != nil {
		return fmt.Errorf("%w: %s", ErrConfig, strings.TrimPrefix(err.Error(), extsort.ErrConfig.Error()+": "))
	}
	return nil
}

// identity is the worker's inputs as the master and its temp dir's name
// know them: -I, and its share of the S3 inputs.
func (c *WorkerConfig) identity() []string {
	if c.Share.whole() {
		return c.Inputs
	}
	return append(slices.Clone(c.Inputs), "share="+c.Share.String())
}

func (c *WorkerConfig) validate() error {
	switch {
	case c.Master == "":
		return fmt.Errorf("%w: the master's address is required", ErrConfig)
	case len(c.Inputs) == 0:
		return fmt.Errorf("%w: at least one input directory (-I) is required", ErrConfig)
	case c.Output == "":
		return fmt.Errorf("%w: an output directory (-O) is required", ErrConfig)
	case c.Memory < 0:
		return fmt.Errorf("%w: memory %d is negative", ErrConfig, c.Memory)
	}
	if _, _, err := net.SplitHostPort(c.Master); err != nil {
		return fmt.Errorf("%w: master address %q: want IP:PORT", ErrConfig, c.Master)
	}
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	if err := c.checkPaths(); err != nil {
		return err
	}
	if c.Memory == 0 {
		c.sharedMemory = true
		c.Memory = extsort.DefaultMemory()
	}
	if c.Memory < extsort.MinMemory {
		return fmt.Errorf("%w: memory %d bytes is below the minimum of %d MiB", ErrConfig, c.Memory, extsort.MinMemory>>20)
	}
	if c.SampleSize <= 0 {
		c.SampleSize = 10000
	}
	if c.RegisterTimeout <= 0 {
		c.RegisterTimeout = 30 * time.Second
	}
	if c.MasterTimeout <= 0 {
		c.MasterTimeout = 30 * time.Second
	}
	if c.FetchParallel <= 0 {
		c.FetchParallel = 4
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Clock = clock.Or(c.Clock)
	return nil
}

// Worker runs the seed's worker state machine as a phase runner: it
// registers with the master, then runs the phases (phases.go) over its
// parts, each with explicit inputs and outputs: the sorter (sorter.go), the
// piece server that serves its sorted runs to peers (serve.go), the fetcher
// that pulls its own partitions' pieces (fetch.go, shuffle.go), the merger
// (merge.go) and the output committer (output.go), in its own temp dir
// (workdir.go). The heartbeats and the job's end are in supervise.go and
// shutdown.go, the RPC handlers in worker_rpc.go.
type Worker struct {
	cfg     WorkerConfig
	clock   clock.Clock
	cores   int // the cores this worker uses (shareCores)
	machine int // GOMAXPROCS when the worker was made: the cores shareCores divides
	metrics *metrics
	sec     security // the job's TLS (none: plaintext)
	outLock *os.File // a local output dir's lock (lockOutput)
	creds   creds    // how the worker dials the master and its peers
	dir     *workDir // locked from prepare to cleanup
	out     output
	s3in    *s3Inputs // the S3 inputs, staged at start; nil: none

	format recordFormat // WorkerConfig.Lines, parsed

	// inputs and inputBytes are read by prepare, then fixed.
	inputs     []extsort.Input
	inputBytes int64

	sm      *StateMachine // set by start
	kick    chan struct{} // buffered(1): a transition wakes the heartbeats
	track   *phaseTracker
	signals *signals     // the master's signals, from the RPC handlers to runPhases
	pieces  *pieceServer // serves the sorted runs once the sort phase is done

	mu        sync.Mutex // protects asg and completed
	asg       assignment // set by registration, then fixed
	completed string     // the job whose output was found complete (join)
}

// assignment is what registration gave this process: fixed afterwards.
type assignment struct {
	jobID      string
	index      int
	epoch      int64
	numWorkers int
	master     dsortpb.MasterClient
}

// peer is one worker as the master lists it.
type peer struct {
	index int
	addr  string
	epoch int64
	state State
	alive bool
}

// NewWorker validates cfg and returns a worker; Run starts it.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	format, err := newFormat(cfg.Lines)
	if err != nil {
		return nil, err
	}
	sec, err := loadTLS(cfg.TLS, cfg.Logger)
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, format: format, clock: cfg.Clock, cores: runtime.GOMAXPROCS(0), machine: runtime.GOMAXPROCS(0), metrics: newMetrics(cfg.Metrics, workerRole),
		dir: newWorkDir(cfg.TempDir, cfg.identity(), cfg.Output), kick: make(chan struct{}, 1), signals: newSignals(),
		sec: sec, creds: creds{token: cfg.Token, tls: sec.client}}
	w.out = output{dir: cfg.Output, logger: cfg.Logger, clock: cfg.Clock, format: format.spec}
	if isS3(cfg.Output) {
		w.out.dir = w.dir.s3out()
	}
	w.track = &phaseTracker{clock: cfg.Clock, metrics: w.metrics, logger: cfg.Logger}
	w.pieces = newPieceServer(w.dir.path, w.fault)
	return w, nil
}

// assigned is the registration's assignment (zero before).
func (w *Worker) assigned() assignment {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.asg
}

// machineID names this machine for the master: /etc/machine-id, else the
// hostname. Workers with the same ID share the machine's memory.
func machineID() string {
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id
		}
	}
	h, _ := os.Hostname()
	return h
}

// StateMachine returns the worker's state machine (nil before Run).
func (w *Worker) StateMachine() *StateMachine { return w.sm }

// WorkDir is the worker's own directory under TempDir.
func (w *Worker) WorkDir() string { return w.dir.path }

// Run does the worker's part of the job and returns nil when the master says
// the job succeeded. It returns an *AbortError when the master aborted the
// job, ErrMasterLost (wrapped) when the master vanished, the phase's error
// when this worker failed, and ctx's error when ctx ended first.
//
// Run is four steps: start (own and clear the temp dir, state machine,
// inputs, serve), register
// (with the master, retrying), supervise (phases and heartbeats until
// the job ends) and the seed's bounded shutdown (shutdown.go), which
// removes the temporary files and waits for every goroutine Run started,
// each step within its bound: only a step cut off at its bound (a hang)
// leaves its goroutine behind.
//
// Every Run that ends with an error once the worker owns its temp dir ends
// in Failed (seed 000 §5.1), with the error as the reason, in the history
// and in the persisted state (worker-state.json, which the shutdown's files
// step then removes with the temp dir; a process that dies before that
// leaves it to the next start, workDir.prepare), before the shutdown's
// steps run: its own
// failure, a lost master and an interrupt (supervisor.fail), the master's
// abort of the job (supervisor.end) and a failure before or while
// registering (failUnfinished). A worker that had already Completed stays
// there: the seed's table has no edge out of Completed.
func (w *Worker) Run(ctx context.Context) (err error) {
	if err := w.dir.prepare(w.cfg.TempDir, w.cfg.Logger); err != nil {
		return err // another process owns the temp dir: nothing of ours to fail
	}
	sd := &shutdown{w: w}
	defer func() {
		w.failUnfinished(err)
		sd.run(&err)
	}()
	if err := w.startStateMachine(); err != nil {
		return err
	}
	if err := w.openS3(ctx); errors.Is(err, errNothingToDo) {
		return nil // it finished a predecessor's commit
	} else if err != nil {
		return err
	}
	if err := w.readInputs(); err != nil {
		return err
	}
	addr, stop, err := w.start()
	if err != nil {
		return err
	}
	sd.server = stop
	warnPlaintext(w.cfg.Logger, w.cfg.TLS.Enabled(), w.cfg.Master, addr)
	conn, err := dialMetered(w.cfg.Master, w.creds, w.metrics)
	if err != nil {
		return err
	}
	sd.conn = conn
	reg, err := w.join(ctx, dsortpb.NewMasterClient(conn), addr)
	if errors.Is(err, errNothingToDo) {
		return nil
	}
	if errors.Is(err, ErrJobSucceeded) {
		sd.succeeded = true // its staged partitions are final: never discarded
		return w.alreadySucceeded(err)
	}
	if err != nil {
		return err
	}
	// Only now, accepted into a live job, may the worker touch its output.
	job := w.assigned().jobID
	kept, err := w.dir.adopt(job, w.format.spec, w.out.inputs)
	if err != nil {
		return err
	}
	if err := w.takeOutput(job, kept); err != nil {
		return err
	}
	return w.supervise(ctx, w.assigned(), time.Duration(reg.GetHeartbeatIntervalMs())*time.Millisecond, reg.GetNeedSample(), sd)
}

// lockOutput locks a local output dir (fsutil.LockInPlace) until the
// shutdown's files step: two workers given one -O (of this job or another,
// or containers that mount one dir at other paths) would each remove the
// other's staged partitions at start and its partitions at commit. An S3
// output's staging dir is in the worker's own temp dir, and the master
// refuses overlapping S3 prefixes (checkOutputLocked).
func (w *Worker) lockOutput() error {
	if w.out.remote != nil {
		return nil
	}
	f, err := fsutil.LockInPlace(w.cfg.Output)
	if errors.Is(err, fsutil.ErrBusy) {
		return errorf(ErrConfig, "dsort: another process is writing partitions to the output dir %s (another worker given the same -O?): give each worker a dir of its own", w.cfg.Output)
	}
	if err != nil {
		return fmt.Errorf("dsort: output dir: %w", err)
	}
	w.outLock = f
	return nil
}

// takeOutput locks and prepares the output dir once the worker is in job;
// a failure is reported to the master at once, which ends the job with it
// (it would otherwise wait for the worker's heartbeats until it gave the
// worker up as lost).
func (w *Worker) takeOutput(job string, kept bool) error {
	err := w.lockOutput()
	if err == nil {
		err = w.out.prepare(job, kept)
	}
	if err != nil {
		w.sm.Transition(Failed, err.Error())
		w.reportState(context.Background(), w.assigned(), Failed, shutdownBounds["heartbeat"]*3/4, err.Error())
	}
	return err
}

// unlockOutput lets go of lockOutput's lock.
func (w *Worker) unlockOutput() {
	if w.outLock != nil {
		w.outLock.Close()
		w.outLock = nil
	}
}

// readInputs reads the inputs' sizes and their print (done.go). It never
// touches the output.
func (w *Worker) readInputs() error {
	dirs := w.cfg.Inputs
	if w.s3in != nil {
		dirs = w.s3in.local()
	}
	inputs, total, err := w.format.scan(dirs)
	if err != nil {
		return err
	}
	w.inputs, w.inputBytes = inputs, total
	if w.s3in != nil && w.s3in.print != nil {
		w.out.inputs = w.s3in.print
		return nil
	}
	if w.out.inputs, err = printInputs(inputs); err != nil {
		return fmt.Errorf("dsort: read inputs: %w", err)
	}
	return nil
}

// failUnfinished moves the state machine to Failed, with err as the reason,
// when Run ends with err before a terminal state: the exits that do not go
// through the supervisor (the inputs unreadable, the master refusing or
// never answering the registration, an interrupt while registering).
func (w *Worker) failUnfinished(err error) {
	if err == nil || w.sm == nil || w.sm.State().IsTerminal() {
		return
	}
	w.cfg.Logger.Error("worker failed", "state", w.sm.State(), "err", err)
	w.sm.Transition(Failed, err.Error())
}

// completedProbe is how long a worker whose output already holds the
// result of its inputs looks for a listening master before it says there
// is nothing to do.
const completedProbe = time.Second

// errNothingToDo: the output holds the completed result of these inputs
// and no master is there to start a new job (join).
var errNothingToDo = errors.New("dsort: already completed")

// join registers with the master. When the output dir holds the committed
// result of these very inputs (done.go) and Rerun is not set, nothing
// listening at the master's address for completedProbe means the job this
// output came from is over: seed 000's "already completed, nothing to do"
// (errNothingToDo; AlreadyCompleted names the job). A master that is there
// runs a job as always: the other workers' inputs may have changed.
func (w *Worker) join(ctx context.Context, master dsortpb.MasterClient, addr string) (*dsortpb.RegisterReply, error) {
	if w.alreadyCompleted(w.out.inputs.withSample(w.inputs)) {
		return nil, errNothingToDo
	}
	return w.register(ctx, master, addr, w.cfg.RegisterTimeout)
}

// alreadyCompleted reports whether the output holds the committed result
// of inputs printed as fp and no master listens (see join); it records the
// job and says so.
func (w *Worker) alreadyCompleted(fp *inputPrint) bool {
	if w.cfg.Rerun || !w.out.hasMarker() {
		return false
	}
	job := w.out.completedJob(fp)
	if job == "" || listening(w.cfg.Master, completedProbe) {
		return false
	}
	w.mu.Lock()
	w.completed = job
	w.mu.Unlock()
	w.cfg.Logger.Info("Worker already completed. Nothing to do.", "job", job, "output", w.cfg.Output)
	return true
}

// listening reports whether anything accepts a TCP connection at addr
// within d. A master that is there, however slow to answer, gets the
// worker as always.
func listening(addr string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Until(deadline))
		if err == nil {
			c.Close()
			return true
		}
		if time.Until(deadline) < 100*time.Millisecond {
			return false
		}
		time.Sleep(100 * time.Millisecond) // a master starting at this moment
	}
}

// AlreadyCompleted is the job whose completed output Run found and left as
// it was, having nothing to do (seed 000 §8.1); "" when Run ran a job.
func (w *Worker) AlreadyCompleted() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.completed
}

// start serves the worker's RPCs; it returns the address peers reach it
// at and a function that stops the server.
func (w *Worker) start() (addr string, stop func(), err error) {
	bind := w.cfg.Bind
	if bind == "" {
		if bind = outboundIP(w.cfg.Master); bind == "" {
			bind = "127.0.0.1"
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(w.cfg.Port)))
	if err != nil {
		return "", nil, fmt.Errorf("dsort: worker listen: %w", err)
	}
	g := &guard{token: w.cfg.Token, metrics: w.metrics, jobID: func() string { return w.assigned().jobID }, logger: w.cfg.Logger, tls: w.sec.server}
	srv := grpc.NewServer(append(g.serverOptions(), sendChunks)...)
	dsortpb.RegisterWorkerServer(srv, &workerRPC{w: w})
	return ln.Addr().String(), serve(srv, ln), nil
}

// startStateMachine creates the worker's state machine, persisted in its
// work dir and timed by its clock: every transition wakes the heartbeats.
// Transitions are logged at Info, or at Debug when the owner reports them
// itself (OnTransition: the CLI prints "worker: A -> B: reason"), so a
// terminal shows each once.
func (w *Worker) startStateMachine() error {
	level := slog.LevelInfo
	if w.cfg.OnTransition != nil {
		level = slog.LevelDebug
	}
	sm, err := newStateMachine(w.dir.path, w.cfg.Logger, func(t lifecycle.Transition[State]) {
		w.wake()
		if w.cfg.OnTransition != nil {
			w.cfg.OnTransition(t)
		}
	}, w.clock.Now, level)
	if err != nil {
		return err
	}
	w.sm, w.track.sm = sm, sm
	return nil
}

func (w *Worker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Worker) fault(ctx context.Context, point string) {
	if w.cfg.FaultHook != nil {
		w.cfg.FaultHook(ctx, point)
	}
}

// register joins the job, retrying while the master is unreachable (up to
// RegisterTimeout), and records what the master assigned.
func (w *Worker) register(ctx context.Context, master dsortpb.MasterClient, addr string, timeout time.Duration) (*dsortpb.RegisterReply, error) {
	ins := w.cfg.identity()
	if w.s3in != nil {
		ins = append(slices.Clone(ins), "s3-listing="+w.s3in.listing)
	}
	req := &dsortpb.RegisterRequest{Address: addr, InputDirs: ins, OutputDir: w.cfg.Output,
		InputBytes: w.inputBytes, Cores: int32(w.cores), MachineId: machineID(), Format: w.format.spec}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rep *dsortpb.RegisterReply
	var last error
	err := registerRetry.Retry(rctx, func(rctx context.Context) error {
		cctx, cancel := context.WithTimeout(rctx, 5*time.Second)
		defer cancel()
		rep, last = master.RegisterWorker(cctx, req)
		if succeeded(last) {
			return backoff.Permanent(errorf(ErrJobSucceeded, "dsort: master %s: %s", w.cfg.Master, statusMessage(last)))
		}
		if last != nil && handshakeRefused(statusMessage(last)) {
			return backoff.Permanent(fmt.Errorf("dsort: the TLS handshake with master %s failed (is this worker's certificate signed by the job's CA, and the master's by this one's --tls-ca?): %s", w.cfg.Master, statusMessage(last)))
		}
		if last != nil && !retryable(last) {
			return backoff.Permanent(fmt.Errorf("dsort: register with master %s: %s", w.cfg.Master, statusMessage(last)))
		}
		if last != nil {
			w.cfg.Logger.Debug("master not reachable yet", "err", last)
		}
		return last
	})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case backoff.IsPermanent(err) || !retryable(last) || handshakeRefused(statusMessage(last)):
		return nil, err
	default:
		hint := ""
		if !w.cfg.TLS.Enabled() && strings.Contains(statusMessage(last), "error reading server preface") {
			hint = " (a master that serves TLS answers a plaintext worker so: give the job's --tls-cert, --tls-key and --tls-ca)"
		}
		return nil, fmt.Errorf("%w: cannot register with %s for %s: %s%s; the output directory %s was left as it was",
			ErrMasterLost, w.cfg.Master, timeout, statusMessage(last), hint, w.cfg.Output)
	}
	asg := assignment{jobID: rep.GetJobId(), index: int(rep.GetIndex()), epoch: rep.GetEpoch(),
		numWorkers: int(rep.GetNumWorkers()), master: master}
	w.mu.Lock()
	w.asg = asg
	w.mu.Unlock()
	w.track.logger = w.cfg.Logger.With("worker", asg.index)
	w.cfg.Logger.Info("registered", "worker", asg.index, "epoch", asg.epoch, "job", asg.jobID, "addr", addr)
	return rep, nil
}

// The worker's retry policies: registering while the master starts (up to
// RegisterTimeout), submitting the sample (a few quick tries), and pulling a
// shuffle piece from a peer that may be restarting (until the job ends).
var (
	registerRetry = backoff.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	sampleRetry   = backoff.Policy{Initial: 200 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 11}
	fetchRetry    = backoff.Policy{Initial: 50 * time.Millisecond, Max: time.Second}
)
