package dsort

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/lifecycle"
	"github.com/gantryhq/gantry/record"
)

// WorkerConfig configures a Worker. Zero values are the documented defaults.
type WorkerConfig struct {
	// Master is the master's IP:PORT. Required.
	Master string
	// Inputs are the input directories, read-only. Required (>= 1).
	Inputs []string
	// Output is the output directory; when the job is done it holds only
	// partition.<n> files. Required.
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
	// SampleSize is how many keys the worker samples. Default 10000.
	SampleSize int
	// RegisterTimeout is how long to keep trying to reach the master at
	// start. Default 30s.
	RegisterTimeout time.Duration
	// MasterTimeout is how long the master may stay unreachable before the
	// worker gives up. Default 30s.
	MasterTimeout time.Duration
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

	sharedMemory bool // Memory was defaulted: divide it among the machine's workers
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
	// Before anything is touched: an output or temp dir inside an input
	// (or the reverse) would have this worker delete or read its own files.
	if err := extsort.CheckSeparate(c.Inputs, c.Output, c.TempDir); err != nil {
		return fmt.Errorf("%w: %s", ErrConfig, strings.TrimPrefix(err.Error(), extsort.ErrConfig.Error()+": "))
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
	return nil
}

// Worker runs the seed's worker state machine: it registers with the
// master, samples its input, sorts it into runs, serves its runs' slices to
// peers, pulls its own partitions' pieces from every worker and merges them
// into partition.<n> files.
type Worker struct {
	cfg     WorkerConfig
	sm      *StateMachine
	workDir string           // cfg.TempDir/gantry-dsort-<id>: state file, runs/, recv/
	owned   *fsutil.OwnedDir // the lock on workDir, held for the process's lifetime
	kick    chan struct{}
	cores   int
	metrics *metrics

	// phase and phaseStart are the phase runPhases is in and when it began
	// (for metrics); only runPhases's goroutine touches them.
	phase      State
	phaseStart time.Time

	inputs     []extsort.Input // immutable after Run starts
	inputBytes int64

	// Per-phase progress: done out of total (bytes or pieces).
	done, total atomic.Int64

	// The master's signals, from the RPC handlers to runPhases. Each
	// carries everything the phase needs: it is the only path by which the
	// signal's data reaches the worker's logic.
	cfgCh     chan partitionConfig // buffered(1), from SetPartitionBoundaries
	shuffleCh chan []peer          // buffered(1), from StartShuffle
	mergeCh   chan struct{}        // buffered(1), from StartMerge
	serveSem  chan struct{}        // bounds concurrent ShuffleData streams

	mu sync.Mutex // protects the fields below
	// Set by registration, then fixed.
	jobID      string
	index      int
	epoch      int64
	numWorkers int
	master     dsortpb.MasterClient
	// configured: a partition config was accepted (later deliveries are
	// retries). bounds, ppw and mem are set from it by runPhases, then fixed.
	configured bool
	bounds     []Boundary
	ppw        int
	mem        memoryPlan
	// runs and splits are set once sorting is done; serving needs them.
	// Invariant: len(splits) == len(runs).
	runs   []extsort.Run
	splits [][]int64
	sorted bool // runs and splits are set
	// kept is the input sorted in memory when the plan keeps it (then
	// runs is its one run); cleanup frees it once the server has stopped.
	kept *extsort.Sorted
	// early merges the partitions completed during the shuffle; set by
	// shuffle, waited for by mergePhase.
	early *earlyMerges
	// peers is the latest worker table (from StartShuffle or GetPeers).
	peers []peer
	conns map[string]*grpc.ClientConn
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
	w := &Worker{cfg: cfg, kick: make(chan struct{}, 1), cores: runtime.GOMAXPROCS(0),
		cfgCh: make(chan partitionConfig, 1), shuffleCh: make(chan []peer, 1),
		mergeCh: make(chan struct{}, 1), conns: map[string]*grpc.ClientConn{}, metrics: newMetrics(cfg.Metrics)}
	w.serveSem = make(chan struct{}, w.cores)
	w.mem = newMemoryPlan(cfg.Memory, false, 1, w.cores, 1, 0)
	sum := sha256.Sum256([]byte(strings.Join(cfg.Inputs, "\x00") + "\x00\x00" + cfg.Output))
	w.workDir = filepath.Join(cfg.TempDir, workDirPrefix+hex.EncodeToString(sum[:6]))
	return w, nil
}

// memory is the memory plan in force (see memoryPlan).
func (w *Worker) memory() memoryPlan {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mem
}

// budget is the memory budget in force.
func (w *Worker) budget() int64 { return w.memory().budget }

// shareMemory plans the budget for a job with n of its workers on this
// machine: a defaulted budget is divided among them.
func (w *Worker) shareMemory(n int) {
	w.mu.Lock()
	w.mem = newMemoryPlan(w.cfg.Memory, w.cfg.sharedMemory, n, w.cores, max(w.ppw, 1), w.inputBytes/record.Size)
	mem := w.mem
	w.mu.Unlock()
	if w.cfg.sharedMemory && n > 1 {
		w.cfg.Logger.Info("memory budget shared with the job's other workers on this machine",
			"workers_on_machine", n, "budget_bytes", mem.budget)
	}
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
func (w *Worker) WorkDir() string { return w.workDir }

func (w *Worker) runDir() string  { return filepath.Join(w.workDir, "runs") }
func (w *Worker) recvDir() string { return filepath.Join(w.workDir, "recv") }

// Run does the worker's part of the job and returns nil when the master says
// the job succeeded. It returns an *AbortError when the master aborted the
// job, ErrMasterLost (wrapped) when the master vanished, the phase's error
// when this worker failed, and ctx's error when ctx ended first. It always
// removes its temporary files, and waits for every goroutine it started,
// before returning.
//
// Run is three steps: start (clean up, state machine, serve), register
// (with the master, retrying) and supervise (phases and heartbeats until
// the job ends).
func (w *Worker) Run(ctx context.Context) (err error) {
	if err := w.prepare(); err != nil {
		return err
	}
	defer w.cleanup(&err)
	addr, stop, err := w.start()
	if err != nil {
		return err
	}
	defer stop()
	conn, err := dialMetered(w.cfg.Master, w.cfg.Token, w.metrics)
	if err != nil {
		return err
	}
	defer conn.Close()
	defer w.closeConns()
	reg, err := w.register(ctx, dsortpb.NewMasterClient(conn), addr)
	if errors.Is(err, ErrJobSucceeded) {
		return w.alreadySucceeded(err)
	}
	if err != nil {
		return err
	}
	// Only now, accepted into a live job, may the worker touch its output.
	if err := w.prepareOutput(); err != nil {
		return err
	}
	return w.supervise(ctx, time.Duration(reg.GetHeartbeatIntervalMs())*time.Millisecond, reg.GetNeedSample())
}

// start creates the state machine and serves the worker's RPCs; it returns
// the address peers reach it at and a function that stops the server.
func (w *Worker) start() (addr string, stop func(), err error) {
	sm, err := NewStateMachine(w.workDir, w.cfg.Logger, func(t lifecycle.Transition[State]) {
		w.wake()
		if w.cfg.OnTransition != nil {
			w.cfg.OnTransition(t)
		}
	})
	if err != nil {
		return "", nil, err
	}
	w.sm = sm
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
	g := &guard{token: w.cfg.Token, metrics: w.metrics, jobID: func() string { w.mu.Lock(); defer w.mu.Unlock(); return w.jobID }}
	srv := grpc.NewServer(g.serverOptions()...)
	dsortpb.RegisterWorkerServer(srv, &workerRPC{w: w})
	return ln.Addr().String(), serve(srv, ln), nil
}

func (w *Worker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// register joins the job, retrying while the master is unreachable (up to
// RegisterTimeout), and records what the master assigned.
func (w *Worker) register(ctx context.Context, master dsortpb.MasterClient, addr string) (*dsortpb.RegisterReply, error) {
	req := &dsortpb.RegisterRequest{Address: addr, InputDirs: w.cfg.Inputs, OutputDir: w.cfg.Output,
		InputBytes: w.inputBytes, Cores: int32(w.cores), MachineId: machineID()}
	rctx, cancel := context.WithTimeout(ctx, w.cfg.RegisterTimeout)
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
	case backoff.IsPermanent(err) || !retryable(last):
		return nil, err
	default:
		return nil, fmt.Errorf("%w: cannot register with %s for %s: %s; the output directory %s was left as it was",
			ErrMasterLost, w.cfg.Master, w.cfg.RegisterTimeout, statusMessage(last), w.cfg.Output)
	}
	w.mu.Lock()
	w.jobID, w.index, w.epoch, w.numWorkers, w.master = rep.GetJobId(), int(rep.GetIndex()), rep.GetEpoch(), int(rep.GetNumWorkers()), master
	w.mu.Unlock()
	w.cfg.Logger.Info("registered", "worker", w.index, "epoch", w.epoch, "job", w.jobID, "addr", addr)
	return rep, nil
}

// supervise runs the phases and the heartbeats, each in its own goroutine,
// until the master ends the job, this worker fails, the master is lost or
// ctx ends; it waits for both goroutines before returning.
func (w *Worker) supervise(ctx context.Context, interval time.Duration, needSample bool) error {
	hbCtx, cancelHB := context.WithCancel(context.Background())
	end := make(chan *dsortpb.HeartbeatReply, 1)
	lost := make(chan error, 1)
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); w.heartbeat(hbCtx, interval, end, lost) }()
	stopHB := func() { cancelHB(); <-hbDone }
	defer stopHB()

	jobCtx, cancelJob := context.WithCancel(ctx)
	defer cancelJob()
	phases := make(chan error, 1)
	go func() { phases <- w.runPhases(jobCtx, needSample) }()
	s := &supervisor{w: w, cancelJob: cancelJob, phases: phases, stopHB: stopHB}
	for {
		select {
		case perr := <-s.phases:
			s.phases = nil
			if perr == nil {
				w.cfg.Logger.Info("all phases completed; waiting for the master's go to exit")
				continue
			}
			if ctx.Err() != nil {
				perr = ctx.Err()
			}
			return s.fail(perr)
		case rep := <-end:
			return s.end(rep)
		case lerr := <-lost:
			return s.fail(lerr)
		case <-ctx.Done():
			return s.fail(ctx.Err())
		}
	}
}

// supervisor holds what supervise's exits share.
type supervisor struct {
	w         *Worker
	cancelJob func()
	phases    <-chan error // nil once runPhases has returned
	stopHB    func()       // stops the heartbeats and waits for them (safe twice)
	once      sync.Once
}

func (s *supervisor) shuttingDown(ok bool) {
	if s.w.cfg.OnShutdown != nil {
		s.once.Do(func() { s.w.cfg.OnShutdown(ok) })
	}
}

// stopPhases cancels the phases and waits for runPhases to return.
func (s *supervisor) stopPhases() {
	s.cancelJob()
	if s.phases != nil {
		<-s.phases
		s.phases = nil
	}
}

// end handles the master's word that the job is over.
func (s *supervisor) end(rep *dsortpb.HeartbeatReply) error {
	ok := rep.GetJobSucceeded() && s.w.sm.Is(Completed)
	s.shuttingDown(ok)
	s.stopPhases()
	if ok {
		return s.w.commitOutput()
	}
	return &AbortError{Reason: rep.GetReason()}
}

// fail moves the worker to Failed and tells the master why, once.
func (s *supervisor) fail(cause error) error {
	s.shuttingDown(false)
	s.stopPhases()
	if !s.w.sm.Is(Failed, Completed) {
		s.w.sm.Transition(Failed, cause.Error())
	}
	s.stopHB()
	s.w.sendHeartbeat(context.Background(), 2*time.Second, cause.Error())
	return cause
}

// heartbeat reports the worker's state every interval and at every
// transition, from its own goroutine, so that CPU-heavy phases never delay
// it. It stops when ctx ends, when the master says should_abort (sent on
// end) or when the master has been unreachable for MasterTimeout (sent on
// lost).
func (w *Worker) heartbeat(ctx context.Context, interval time.Duration, end chan<- *dsortpb.HeartbeatReply, lost chan<- error) {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	lastOK := time.Now()
	for {
		// A completed worker only waits for the job's end: ask more often,
		// so that the whole job exits soon after its last worker is done.
		next := interval
		if w.sm.Is(Completed) {
			next = interval / 5
		}
		t.Reset(next)
		sent := w.sm.State() // states only move forward: sendHeartbeat sends this or later
		rep, err := w.sendHeartbeat(ctx, max(4*interval, 2*time.Second), "")
		if err != nil && ctx.Err() == nil {
			w.metrics.heartbeatMissed()
		}
		switch {
		case err == nil:
			lastOK = time.Now()
			if rep.GetShouldAbort() {
				end <- rep
				return
			}
			if sent == Completed {
				w.fault(ctx, "completed") // the master knows; the job's end is not heard yet
			}
		case ctx.Err() != nil:
			return
		case time.Since(lastOK) > w.cfg.MasterTimeout:
			lost <- fmt.Errorf("%w: no reply from %s for %s: %s; the output directory %s was left as it was",
				ErrMasterLost, w.cfg.Master, w.cfg.MasterTimeout, statusMessage(err), w.cfg.Output)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
	}
}

func (w *Worker) sendHeartbeat(ctx context.Context, timeout time.Duration, errMsg string) (*dsortpb.HeartbeatReply, error) {
	st := w.sm.State()
	w.mu.Lock()
	req := &dsortpb.HeartbeatRequest{JobId: w.jobID, Index: int32(w.index), Epoch: w.epoch, State: stateToPB(st),
		Progress: w.progress(st), Message: w.message(st), Error: errMsg}
	master := w.master
	w.mu.Unlock()
	if st == Failed && errMsg == "" {
		if h := w.sm.History(); len(h) > 0 {
			req.Error = h[len(h)-1].Reason
		}
	}
	req.Phases = phasesToPB(w.phaseTimes())
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return master.Heartbeat(cctx, req)
}

// phaseTimes is the state machine's measured phases.
func (w *Worker) phaseTimes() []PhaseTime {
	var out []PhaseTime
	for _, p := range w.sm.Phases() {
		out = append(out, PhaseTime{State: p.Phase, Duration: p.Duration(), Done: p.Done})
	}
	return out
}

func (w *Worker) frac() float64 {
	t := w.total.Load()
	if t <= 0 {
		return 0
	}
	return float64(w.done.Load()) / float64(t)
}

func (w *Worker) progress(st State) float64 { return Progress(st, w.frac()) }

// message is the seed's §7 status message.
func (w *Worker) message(st State) string {
	pct := fmt.Sprintf("%.0f%%", 100*w.frac())
	switch st {
	case Initializing:
		return "Initializing worker"
	case Sampling:
		return "Extracting samples"
	case WaitingForPartitionConfig:
		return "Waiting for partition config"
	case Sorting:
		return "Sorting: " + pct
	case WaitingForShuffleSignal:
		return "Sorting complete, waiting for shuffle signal"
	case Shuffling:
		return "Shuffling: " + pct
	case WaitingForMergeSignal:
		return "Shuffle complete, waiting for merge signal"
	case Merging:
		return "Merging: " + pct
	case Completed:
		return "All phases completed"
	}
	return "Worker failed"
}

func (w *Worker) fault(ctx context.Context, point string) {
	if w.cfg.FaultHook != nil {
		w.cfg.FaultHook(ctx, point)
	}
}

func (w *Worker) startPhase(to State, reason string, total int64) error {
	now := time.Now()
	if slices.Contains(phaseStates, w.phase) {
		w.metrics.phaseDone(w.phase, now.Sub(w.phaseStart))
	}
	w.phase, w.phaseStart = to, now
	w.done.Store(0)
	w.total.Store(total)
	return w.sm.Transition(to, reason)
}

func waitFor[T any](ctx context.Context, ch <-chan T) (T, error) {
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// runPhases walks the seed's normal flow from Initializing to Completed.
// However it ends, no merge started during the shuffle outlives it.
func (w *Worker) runPhases(ctx context.Context, needSample bool) error {
	defer func() {
		w.mu.Lock()
		early := w.early
		w.mu.Unlock()
		if early != nil {
			early.stop()
		}
	}()
	for _, phase := range []func(context.Context) error{
		func(ctx context.Context) error { return w.samplePhase(ctx, needSample) },
		w.sortPhase,
		w.shufflePhase,
		w.mergePhase,
	} {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	return w.startPhase(Completed, "all phases completed successfully", 0)
}

// samplePhase: Sampling, then WaitingForPartitionConfig.
func (w *Worker) samplePhase(ctx context.Context, needSample bool) error {
	reason := "registered; sampling"
	if !needSample {
		reason = "registered again; the master already holds this worker's sample"
	}
	if err := w.startPhase(Sampling, reason, 0); err != nil {
		return err
	}
	if needSample {
		if err := w.sample(ctx); err != nil {
			return err
		}
	}
	return w.startPhase(WaitingForPartitionConfig, "sampling complete, waiting for config", 0)
}

// sortPhase takes in the partition config, then Sorting, then
// WaitingForShuffleSignal.
func (w *Worker) sortPhase(ctx context.Context) error {
	pc, err := waitFor(ctx, w.cfgCh)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.bounds, w.ppw = pc.bounds, pc.perWorker
	w.mu.Unlock()
	w.shareMemory(pc.onMachine)
	if err := w.startPhase(Sorting, fmt.Sprintf("config received: %d partitions, %d per worker",
		pc.perWorker*pc.workers, pc.perWorker), w.inputBytes); err != nil {
		return err
	}
	if err := w.sort(ctx); err != nil {
		return err
	}
	return w.startPhase(WaitingForShuffleSignal, "sorting complete, waiting for signal", 0)
}

// shufflePhase: Shuffling once signalled, then WaitingForMergeSignal.
func (w *Worker) shufflePhase(ctx context.Context) error {
	peers, err := waitFor(ctx, w.shuffleCh)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.peers = peers
	pieces := int64(w.numWorkers * w.ppw)
	w.mu.Unlock()
	if err := w.startPhase(Shuffling, "signal received, starting shuffle", pieces); err != nil {
		return err
	}
	if err := w.shuffle(ctx); err != nil {
		return err
	}
	return w.startPhase(WaitingForMergeSignal, "shuffle complete, waiting for signal", 0)
}

// mergePhase: Merging once signalled.
func (w *Worker) mergePhase(ctx context.Context) error {
	if _, err := waitFor(ctx, w.mergeCh); err != nil {
		return err
	}
	recvBytes, err := dirSize(w.recvDir())
	if err != nil {
		return err
	}
	for p := w.index * w.ppw; p < (w.index+1)*w.ppw; p++ {
		for _, sg := range w.ownSegments(p) {
			recvBytes += sg.Length
		}
	}
	if err := w.startPhase(Merging, "signal received, starting merge", recvBytes); err != nil {
		return err
	}
	w.mu.Lock()
	early := w.early
	w.mu.Unlock()
	var merged map[int]bool
	if early != nil { // set by shuffle, which always runs first
		var err error
		if merged, err = early.wait(); err != nil {
			return err
		}
		w.done.Add(early.bytes.Load())
	}
	return w.merge(ctx, merged)
}

func (w *Worker) sample(ctx context.Context) error {
	keys, records, err := sampleInputs(w.inputs, w.cfg.SampleSize)
	if err != nil {
		return err
	}
	w.fault(ctx, "Sampling")
	w.mu.Lock()
	req := &dsortpb.SampleRequest{JobId: w.jobID, Index: int32(w.index), Epoch: w.epoch, Keys: keys, Records: records}
	master := w.master
	w.mu.Unlock()
	var last error
	err = sampleRetry.Retry(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, last = master.SubmitSample(cctx, req); last != nil && !retryable(last) {
			return backoff.Permanent(last)
		}
		return last
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("dsort: submit sample: %s", statusMessage(last))
}

// The worker's retry policies: registering while the master starts (up to
// RegisterTimeout), submitting the sample (a few quick tries), and pulling a
// shuffle piece from a peer that may be restarting (until the job ends).
var (
	registerRetry = backoff.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	sampleRetry   = backoff.Policy{Initial: 200 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 11}
	fetchRetry    = backoff.Policy{Initial: 50 * time.Millisecond, Max: time.Second}
)

// sort sorts the input into runs: one run kept in memory when the memory
// plan allows (no spill at all), else runs spilled to the temp dir.
func (w *Worker) sort(ctx context.Context) error {
	plan := w.memory()
	cfg := extsort.Config{Memory: plan.sort, TempDir: w.workDir, Logger: w.cfg.Logger}
	progress := func(n int64) { w.done.Add(n); w.metrics.read(n) }
	var runs []extsort.Run
	if plan.keep {
		kept, err := extsort.SortInMemory(ctx, cfg, w.inputs, progress)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.kept = kept
		w.mu.Unlock()
		runs = []extsort.Run{{Path: "sorted input in memory", Records: kept.Records(), Reader: kept}}
	} else {
		var err error
		if runs, err = extsort.GenerateRuns(ctx, cfg, w.inputs, w.runDir(), progress); err != nil {
			return err
		}
	}
	w.metrics.sorted(w.inputBytes)
	w.fault(ctx, "Sorting")
	w.mu.Lock()
	bounds, self := w.bounds, w.index
	w.mu.Unlock()
	splits, err := runSplits(runs, bounds, self)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.runs, w.splits, w.sorted = runs, splits, true
	w.mu.Unlock()
	return nil
}

func dirSize(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("dsort: %w", err)
	}
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n, nil
}

func (w *Worker) closeConns() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.conns {
		c.Close()
	}
	w.conns = map[string]*grpc.ClientConn{}
}
