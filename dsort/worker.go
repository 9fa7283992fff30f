package dsort

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/lifecycle"
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
	// start. Default 60s.
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
		c.RegisterTimeout = 60 * time.Second
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
	workDir string // cfg.TempDir/gantry-dsort-<id>: state file, runs/, recv/
	kick    chan struct{}
	cores   int

	inputs     []extsort.Input // immutable after Run starts
	inputBytes int64

	// Per-phase progress: done out of total (bytes or pieces).
	done, total atomic.Int64
	// memory is the budget in force: cfg.Memory, or with a defaulted budget
	// this worker's share of it, stored once the partition config arrives
	// (before Sorting). Read it through budget().
	memory atomic.Int64

	cfgCh     chan *dsortpb.PartitionConfig // buffered(1), from SetPartitionBoundaries
	shuffleCh chan []*dsortpb.Peer          // buffered(1), from StartShuffle
	mergeCh   chan struct{}                 // buffered(1), from StartMerge
	serveSem  chan struct{}                 // bounds concurrent ShuffleData streams

	mu sync.Mutex // protects the fields below
	// Set by registration, then fixed.
	jobID      string
	index      int
	epoch      int64
	numWorkers int
	master     dsortpb.MasterClient
	// Set by SetPartitionBoundaries, then fixed.
	bounds []Boundary
	ppw    int
	// runs and splits are set once sorting is done; serving needs them.
	// Invariant: len(splits) == len(runs).
	runs   []extsort.Run
	splits [][]int64
	sorted bool // runs and splits are set
	// peers is the latest worker table (from StartShuffle or GetPeers).
	peers []*dsortpb.Peer
	conns map[string]*grpc.ClientConn
}

// NewWorker validates cfg and returns a worker; Run starts it.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, kick: make(chan struct{}, 1), cores: runtime.GOMAXPROCS(0),
		cfgCh: make(chan *dsortpb.PartitionConfig, 1), shuffleCh: make(chan []*dsortpb.Peer, 1),
		mergeCh: make(chan struct{}, 1), conns: map[string]*grpc.ClientConn{}}
	w.serveSem = make(chan struct{}, w.cores)
	w.memory.Store(cfg.Memory)
	sum := sha256.Sum256([]byte(strings.Join(cfg.Inputs, "\x00") + "\x00\x00" + cfg.Output))
	w.workDir = filepath.Join(cfg.TempDir, "gantry-dsort-"+hex.EncodeToString(sum[:6]))
	return w, nil
}

// budget is the memory budget in force (see Worker.memory).
func (w *Worker) budget() int64 { return w.memory.Load() }

// shareMemory divides a defaulted budget among the job's n workers on this
// machine, keeping at least what a sort needs.
func (w *Worker) shareMemory(n int) {
	if !w.cfg.sharedMemory || n <= 1 {
		return
	}
	m := max(w.cfg.Memory/int64(n), extsort.MinMemory+runtimeReserve)
	w.memory.Store(m)
	w.cfg.Logger.Info("memory budget shared with the job's other workers on this machine",
		"workers_on_machine", n, "budget_bytes", m)
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

// prepare cleans what a previous process of this worker left behind and
// creates the directories.
func (w *Worker) prepare() error {
	if snap, err := lifecycle.LoadSnapshot(filepath.Join(w.workDir, StateFileName)); err == nil {
		w.cfg.Logger.Warn("a previous run of this worker stopped here; cleaning up and starting again",
			"previous_state", snap.State, "at", snap.Updated.Format(time.RFC3339))
	}
	if err := os.RemoveAll(w.workDir); err != nil {
		return fmt.Errorf("dsort: clean temp dir: %w", err)
	}
	for _, d := range []string{w.runDir(), w.recvDir(), w.cfg.Output} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("dsort: %w", err)
		}
	}
	return cleanOutput(w.cfg.Output)
}

// cleanOutput removes partition.<n> files and our temporaries from dir, so
// that a restarted worker never leaves an earlier attempt's files behind.
func cleanOutput(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("dsort: output dir: %w", err)
	}
	for _, e := range ents {
		if isPartitionName(e.Name()) || strings.HasPrefix(e.Name(), ".partition.") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("dsort: clean output dir: %w", err)
			}
		}
	}
	return nil
}

// isPartitionName reports whether name is partition.<digits> (leading zeros
// included: such a file would also break validation of the output).
func isPartitionName(name string) bool {
	n, ok := strings.CutPrefix(name, "partition.")
	return ok && n != "" && strings.TrimLeft(n, "0123456789") == ""
}

// Run does the worker's part of the job and returns nil when the master says
// the job succeeded. It returns an *AbortError when the master aborted the
// job, ErrMasterLost (wrapped) when the master vanished, the phase's error
// when this worker failed, and ctx's error when ctx ended first. It always
// removes its temporary files before returning.
func (w *Worker) Run(ctx context.Context) (err error) {
	inputs, total, err := extsort.ScanInputs(w.cfg.Inputs)
	if err != nil {
		return err
	}
	w.inputs, w.inputBytes = inputs, total
	if err := w.prepare(); err != nil {
		return err
	}
	defer w.cleanup(&err)
	sm, err := NewStateMachine(w.workDir, w.cfg.Logger, func(t lifecycle.Transition[State]) {
		w.wake()
		if w.cfg.OnTransition != nil {
			w.cfg.OnTransition(t)
		}
	})
	if err != nil {
		return err
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
		return fmt.Errorf("dsort: worker listen: %w", err)
	}
	g := &guard{token: w.cfg.Token, jobID: func() string { w.mu.Lock(); defer w.mu.Unlock(); return w.jobID }}
	srv := grpc.NewServer(g.serverOptions()...)
	dsortpb.RegisterWorkerServer(srv, &workerRPC{w: w})
	serveDone := make(chan struct{})
	go func() { defer close(serveDone); srv.Serve(ln) }()
	defer func() {
		lifecycle.StopWithin(2*time.Second, srv.GracefulStop, srv.Stop)
		<-serveDone
	}()
	addr := ln.Addr().String()

	conn, err := dial(w.cfg.Master, w.cfg.Token)
	if err != nil {
		return err
	}
	defer conn.Close()
	defer w.closeConns()
	master := dsortpb.NewMasterClient(conn)
	reg, err := w.register(ctx, master, addr)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.jobID, w.index, w.epoch, w.numWorkers, w.master = reg.GetJobId(), int(reg.GetIndex()), reg.GetEpoch(), int(reg.GetNumWorkers()), master
	w.mu.Unlock()
	w.cfg.Logger.Info("registered", "worker", w.index, "epoch", w.epoch, "job", w.jobID, "addr", addr)

	interval := time.Duration(reg.GetHeartbeatIntervalMs()) * time.Millisecond
	hbCtx, stopHB := context.WithCancel(context.Background())
	end := make(chan *dsortpb.HeartbeatReply, 1)
	lost := make(chan error, 1)
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); w.heartbeat(hbCtx, interval, end, lost) }()
	defer func() { stopHB(); <-hbDone }()

	jobCtx, cancelJob := context.WithCancel(ctx)
	defer cancelJob()
	phases := make(chan error, 1)
	go func() { phases <- w.runPhases(jobCtx, reg.GetNeedSample()) }()

	phasesDone := false
	waitPhases := func() {
		if !phasesDone {
			<-phases
			phasesDone = true
		}
	}
	var shutdownOnce sync.Once
	shuttingDown := func(ok bool) {
		if w.cfg.OnShutdown != nil {
			shutdownOnce.Do(func() { w.cfg.OnShutdown(ok) })
		}
	}
	fail := func(cause error) error {
		shuttingDown(false)
		cancelJob()
		waitPhases()
		if !w.sm.Is(Failed, Completed) {
			w.sm.Transition(Failed, cause.Error())
		}
		stopHB()
		<-hbDone
		w.sendHeartbeat(context.Background(), 2*time.Second, cause.Error())
		return cause
	}
	phasesCh := phases
	for {
		select {
		case perr := <-phasesCh:
			phasesDone, phasesCh = true, nil
			if perr != nil {
				if ctx.Err() != nil {
					perr = ctx.Err()
				}
				return fail(perr)
			}
			w.cfg.Logger.Info("all phases completed; waiting for the master's go to exit")
		case rep := <-end:
			shuttingDown(rep.GetJobSucceeded() && w.sm.Is(Completed))
			cancelJob()
			waitPhases()
			if rep.GetJobSucceeded() && w.sm.Is(Completed) {
				return nil
			}
			return &AbortError{Reason: rep.GetReason()}
		case lerr := <-lost:
			return fail(lerr)
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
}

// cleanup removes the runs and received pieces; on failure it keeps the
// state file so a restart can report where this process stopped.
func (w *Worker) cleanup(errp *error) {
	if *errp == nil {
		os.RemoveAll(w.workDir)
		return
	}
	os.RemoveAll(w.runDir())
	os.RemoveAll(w.recvDir())
	if w.sm == nil || !w.sm.Is(Completed) {
		cleanOutput(w.cfg.Output)
	}
}

func (w *Worker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Worker) register(ctx context.Context, master dsortpb.MasterClient, addr string) (*dsortpb.RegisterReply, error) {
	deadline := time.Now().Add(w.cfg.RegisterTimeout)
	req := &dsortpb.RegisterRequest{Address: addr, InputDirs: w.cfg.Inputs, OutputDir: w.cfg.Output,
		InputBytes: w.inputBytes, Cores: int32(w.cores), MachineId: machineID()}
	backoff := 100 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rep, err := master.RegisterWorker(cctx, req)
		cancel()
		if err == nil {
			return rep, nil
		}
		if !retryable(err) {
			return nil, fmt.Errorf("dsort: register with master %s: %s", w.cfg.Master, statusMessage(err))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: cannot register with %s for %s: %s", ErrMasterLost, w.cfg.Master, w.cfg.RegisterTimeout, statusMessage(err))
		}
		w.cfg.Logger.Debug("master not reachable yet", "err", err)
		if err := sleepCtx(ctx, backoff); err != nil {
			return nil, err
		}
		backoff = min(2*backoff, 2*time.Second)
	}
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
		rep, err := w.sendHeartbeat(ctx, max(4*interval, 2*time.Second), "")
		switch {
		case err == nil:
			lastOK = time.Now()
			if rep.GetShouldAbort() {
				end <- rep
				return
			}
		case ctx.Err() != nil:
			return
		case time.Since(lastOK) > w.cfg.MasterTimeout:
			lost <- fmt.Errorf("%w: no reply from %s for %s: %s", ErrMasterLost, w.cfg.Master, w.cfg.MasterTimeout, statusMessage(err))
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
	for _, p := range w.sm.Phases() {
		req.Phases = append(req.Phases, &dsortpb.PhaseTime{State: stateToPB(p.Phase), DurationMs: p.Duration().Milliseconds(), Done: p.Done})
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return master.Heartbeat(cctx, req)
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runPhases walks the seed's normal flow from Initializing to Completed.
func (w *Worker) runPhases(ctx context.Context, needSample bool) error {
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
	if err := w.startPhase(WaitingForPartitionConfig, "sampling complete, waiting for config", 0); err != nil {
		return err
	}
	pc, err := waitFor(ctx, w.cfgCh)
	if err != nil {
		return err
	}
	w.shareMemory(int(pc.GetWorkersOnMachine()))
	if err := w.startPhase(Sorting, fmt.Sprintf("config received: %d partitions, %d per worker",
		pc.GetNumPartitions(), pc.GetPartitionsPerWorker()), w.inputBytes); err != nil {
		return err
	}
	if err := w.sort(ctx); err != nil {
		return err
	}
	if err := w.startPhase(WaitingForShuffleSignal, "sorting complete, waiting for signal", 0); err != nil {
		return err
	}
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
	if err := w.startPhase(WaitingForMergeSignal, "shuffle complete, waiting for signal", 0); err != nil {
		return err
	}
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
	if err := w.merge(ctx); err != nil {
		return err
	}
	return w.startPhase(Completed, "all phases completed successfully", 0)
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
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := master.SubmitSample(cctx, req)
		cancel()
		if err == nil {
			return nil
		}
		if !retryable(err) || attempt == 10 {
			return fmt.Errorf("dsort: submit sample: %s", statusMessage(err))
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// runtimeReserve is kept out of the sort's budget for what the worker
// allocates besides extsort's buffers: the Go runtime, gRPC's transport
// buffers, heartbeats.
const runtimeReserve = 24 << 20

func (w *Worker) sort(ctx context.Context) error {
	mem := max(w.budget()-runtimeReserve, extsort.MinMemory)
	runs, err := extsort.GenerateRuns(ctx, extsort.Config{Memory: mem, TempDir: w.workDir, Logger: w.cfg.Logger},
		w.inputs, w.runDir(), func(n int64) { w.done.Add(n) })
	if err != nil {
		return err
	}
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
