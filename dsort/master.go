package dsort

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/lifecycle"
	"github.com/gantryhq/gantry/linesort"
)

// MasterConfig configures a Master. Zero values are the documented defaults.
type MasterConfig struct {
	// Workers is the number of workers of the job (N). Required, >= 1.
	Workers int
	// Addr is the listen address. Default "127.0.0.1:0" (loopback, any
	// port): listening on other hosts' reach is the caller's choice.
	Addr string
	// Token, when set, must accompany every RPC (metadata gantry-token).
	Token string
	// TLS, when set, is the job's mutual TLS: the master serves and dials
	// with this certificate and accepts only peers whose certificate the
	// CA signed (tls.go). Default: plaintext.
	TLS TLSFiles
	// JobID names the job. Default: random.
	JobID string
	// Lines, when set, makes the job sort text lines ordered by these
	// options (--format lines) instead of gensort records; every worker
	// must sort lines by the same options (WorkerConfig.Lines), or its
	// registration is refused. Default: gensort records.
	Lines *linesort.Options
	// HeartbeatInterval is how often workers report. Default 500ms.
	HeartbeatInterval time.Duration
	// LostAfter is the silence after which a worker is reported lost (it
	// may still come back). Default 5s.
	LostAfter time.Duration
	// RejoinTimeout is the silence after which a worker that has not come
	// back aborts the job. Default 60s.
	RejoinTimeout time.Duration
	// StateFile, when set, is where the master saves the job's state at
	// each transition (atomically) and, at start, resumes a job saved
	// there: restarted with the same file and port it re-adopts the running
	// workers. Default: none (a master crash ends the job).
	StateFile string
	// RegisterTimeout is how long the master waits for all N workers to
	// register before it aborts the job, naming the missing ones. Default 2m.
	RegisterTimeout time.Duration
	// PartitionSize bounds the expected size of one partition. Each worker
	// gets max(cores, ⌈input/(N·PartitionSize)⌉) partitions, at most
	// MaxPartitionsPerWorker and MaxPartitions/N. Default 64 MiB.
	PartitionSize int64
	// ShutdownGrace is how long the master waits, once the job has ended,
	// for every live worker to hear about it. Default 5s.
	ShutdownGrace time.Duration
	// OnListen is called with the IP:PORT other hosts can reach, as soon
	// as the master listens. Optional.
	OnListen func(addr string)
	// OnRegistered is called once, with the workers' IPs in worker order,
	// when all N have registered. Optional.
	OnRegistered func(ips []string)
	// OnChange is called, outside locks, each time a worker reports a new
	// state (which the master logs at debug level only). Optional.
	OnChange func(WorkerInfo)
	// OnShutdown is called once, when the job has ended and the master
	// starts shutting down, with whether the job succeeded: the place for a
	// caller to arm a hard-deadline watchdog. Optional.
	OnShutdown func(succeeded bool)
	// FaultHook, when set, is called (with a context that never ends) as
	// each of the shutdown's steps begins, at "shutdown-server",
	// "shutdown-sends" and "shutdown-connections", so that tests can make
	// a step hang. Optional.
	FaultHook func(ctx context.Context, point string)
	// Logger receives the master's log. Default: discard.
	Logger *slog.Logger
	// Metrics, when set, receives dsort's metrics (see metrics.go).
	// Default: none.
	Metrics prometheus.Registerer
	// Clock times the heartbeats' silence, the timeouts and the shutdown
	// grace. Default: the real clock.
	Clock clock.Clock
}

// MaxWorkers bounds a job's workers: one master tracks each by heartbeat.
const MaxWorkers = 10_000

// MaxPartitionsPerWorker and MaxPartitions bound the partitions a worker
// and a job get, however small PartitionSize is against the input (each is
// a file, a boundary the master sends every worker, and a transfer).
const (
	MaxPartitionsPerWorker = 16_384
	MaxPartitions          = 1 << 20
)

func (c *MasterConfig) validate() error {
	if c.Workers < 1 || c.Workers > MaxWorkers {
		return fmt.Errorf("%w: need 1 to %d workers, got %d", ErrConfig, MaxWorkers, c.Workers)
	}
	if c.HeartbeatInterval > 0 && c.HeartbeatInterval < time.Millisecond {
		return fmt.Errorf("%w: heartbeat interval %s: want at least 1ms", ErrConfig, c.HeartbeatInterval)
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	if _, err := newFormat(c.Lines); err != nil {
		return err
	}
	if c.JobID == "" {
		var b [8]byte
		rand.Read(b[:])
		c.JobID = hex.EncodeToString(b[:])
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 500 * time.Millisecond
	}
	if c.LostAfter <= 0 {
		c.LostAfter = 5 * time.Second
	}
	if c.RejoinTimeout <= 0 {
		c.RejoinTimeout = 60 * time.Second
	}
	if c.PartitionSize <= 0 {
		c.PartitionSize = 64 << 20
	}
	if c.RegisterTimeout <= 0 {
		c.RegisterTimeout = 2 * time.Minute
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Clock = clock.Or(c.Clock)
	return nil
}

// WorkerInfo is the master's view of one worker.
type WorkerInfo struct {
	Index    int
	Address  string
	Epoch    int64
	State    State
	Progress float64 // percent, seed 000 §7
	Message  string
	Phases   []PhaseTime
	Alive    bool
	LastSeen time.Duration // since the last heartbeat
}

// PhaseTime is one measured phase of a worker.
type PhaseTime struct {
	State    State
	Duration time.Duration
	Done     bool
}

// signal is one of the master's signals to a worker; it indexes
// member.sent.
type signal int

const (
	sigConfig signal = iota
	sigShuffle
	sigMerge
	numSignals
)

type sendState uint8

const (
	unsent sendState = iota
	inflight
	delivered
)

// member is one worker slot. Fields are protected by Master.mu.
type member struct {
	index      int
	identity   string
	inputs     []string // as registered: -I, and a share of S3 inputs with its listing (checkShareLocked)
	output     string   // as registered: -O (checkOutputLocked)
	addr       string
	host       string
	machine    string // machine_id, or host when the worker sent none
	cores      int
	inputBytes int64
	epoch      int64
	client     dsortpb.WorkerClient
	conn       *grpc.ClientConn

	state    State
	progress float64
	message  string
	errMsg   string
	phases   []PhaseTime
	lastSeen time.Time
	lost     bool

	// sample survives re-registration: sampling is deterministic.
	sample  []byte
	records int64
	sampled bool

	// sent tracks the master's signals to the current epoch.
	sent [numSignals]sendState
	// heardEnd: the current epoch got a heartbeat reply with should_abort.
	heardEnd bool
}

// Master coordinates a job: it registers workers, computes partition
// boundaries from their samples, runs the shuffle and merge barriers, watches
// heartbeats and decides when the job has succeeded or must abort. It is the
// source of truth for the job's progress.
type Master struct {
	cfg     MasterConfig
	clock   clock.Clock
	start   time.Time
	kick    chan struct{} // buffered(1): wake the control loop
	metrics *metrics
	sends   sync.WaitGroup // signal deliveries started by step; Run waits for them
	sec     security       // the job's TLS (none: plaintext)
	creds   creds          // how the master dials workers

	mu sync.Mutex // protects the fields below
	// members are in registration order. Invariant: len <= cfg.Workers.
	members []*member
	// phase only moves forward (see JobPhase); ended is closed when it
	// becomes JobSucceeded or JobAborted.
	phase      JobPhase
	phaseStart time.Time // when phase began, for metrics
	ended      chan struct{}
	// bounds is nil until every worker's sample is in (JobSorting), then
	// fixed.
	bounds      []Boundary
	ppw         int // partitions per worker, set with bounds
	abortReason string
	announced   bool // OnRegistered called
}

// NewMaster validates cfg and returns a master; Run starts it.
func NewMaster(cfg MasterConfig) (*Master, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	sec, err := loadTLS(cfg.TLS, cfg.Logger)
	if err != nil {
		return nil, err
	}
	warnPlaintext(cfg.Logger, cfg.TLS.Enabled(), cfg.Addr)
	return &Master{cfg: cfg, clock: cfg.Clock, kick: make(chan struct{}, 1), ended: make(chan struct{}), metrics: newMetrics(cfg.Metrics, masterRole),
		sec: sec, creds: creds{token: cfg.Token, tls: sec.client}}, nil
}

// JobID returns the job's ID.
func (m *Master) JobID() string { return m.cfg.JobID }

// Run listens, drives the job to its end and returns nil when it succeeded,
// an *AbortError when it was aborted (including when ctx ends first). Before
// returning it gives workers up to ShutdownGrace to hear the outcome, then
// runs the bounded stop (stop): it waits for every goroutine it started
// (the server's and the signal deliveries) unless that step was cut off at
// its bound, in which case they end with the process.
func (m *Master) Run(ctx context.Context) error {
	m.start = m.clock.Now()
	m.mu.Lock()
	m.phaseStart = m.start
	m.mu.Unlock()
	if err := m.restore(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", m.cfg.Addr)
	if err != nil {
		return fmt.Errorf("dsort: master listen: %w", err)
	}
	g := &guard{token: m.cfg.Token, metrics: m.metrics, jobID: func() string { return m.cfg.JobID },
		open: map[string]bool{
			dsortpb.Master_RegisterWorker_FullMethodName: true,
			dsortpb.Master_GetJobStatus_FullMethodName:   true,
		}, logger: m.cfg.Logger, tls: m.sec.server}
	srv := grpc.NewServer(g.serverOptions()...)
	dsortpb.RegisterMasterServer(srv, &masterRPC{m: m})
	stopServer := serve(srv, ln)
	m.announce(ln.Addr().(*net.TCPAddr).Port)
	m.announceResumed()

	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	m.loop(ctx, sendCtx)
	m.stop(stopServer, cancelSends)
	m.mu.Lock()
	ok, reason := m.phase == JobSucceeded, m.abortReason
	m.mu.Unlock()
	if ok {
		m.cfg.Logger.Info("job succeeded", "elapsed", m.clock.Since(m.start).Round(time.Millisecond))
		return nil
	}
	return &AbortError{Reason: reason}
}

// stop is seed 003's master stop(): "Stopping Master node...", then the
// gRPC server (graceful for 2 s, then forced; 3 s), the signals still being
// sent (the seed's executor; 3 s) and the connections to the workers (2 s),
// each cut off at its bound (lifecycle.RunSteps), then "Master node
// stopped". The CLI's 15 s watchdog, armed when the job ended, is the last
// resort.
func (m *Master) stop(stopServer, cancelSends func()) {
	log := m.cfg.Logger
	log.Info("Stopping Master node...")
	steps := []lifecycle.Step{
		{Name: "server", Bound: 3 * time.Second, Run: stopServer},
		{Name: "sends", Bound: 3 * time.Second, Run: func() { cancelSends(); m.sends.Wait() }},
		{Name: "connections", Bound: 2 * time.Second, Run: m.closeConns},
	}
	if hook := m.cfg.FaultHook; hook != nil {
		for i, s := range steps {
			steps[i].Run = func() { hook(context.Background(), "shutdown-"+s.Name); s.Run() }
		}
	}
	cut := lifecycle.RunSteps(func(s lifecycle.Step) {
		log.Warn("shutdown step cut off at its bound", "step", s.Name, "bound", s.Bound)
	}, steps...)
	log.Info("Master node stopped", "cut_off", cut)
}

// closeConns closes the master's connections to its workers.
func (m *Master) closeConns() {
	m.mu.Lock()
	var conns []io.Closer
	for _, mb := range m.members {
		if mb.conn != nil {
			conns = append(conns, mb.conn)
		}
	}
	m.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// announce logs and reports the address other hosts can reach.
func (m *Master) announce(port int) {
	addr := net.JoinHostPort(reachableIP(), strconv.Itoa(port))
	if h := hostOf(m.cfg.Addr); h != "" && h != "0.0.0.0" && h != "::" {
		addr = net.JoinHostPort(h, strconv.Itoa(port))
	}
	m.cfg.Logger.Info("master listening", "addr", addr, "job", m.cfg.JobID, "workers", m.cfg.Workers)
	if m.cfg.OnListen != nil {
		m.cfg.OnListen(addr)
	}
}

// loop runs the control loop until the job has ended and every live worker
// has heard so, or ShutdownGrace has passed since it ended. Signals go out
// under sendCtx.
func (m *Master) loop(ctx, sendCtx context.Context) {
	tick := m.clock.NewTicker(min(m.cfg.HeartbeatInterval/2, 100*time.Millisecond))
	defer tick.Stop()
	var graceEnd time.Time
	// cancelled is ctx.Done() until it fires, then nil: an interrupted
	// master still gives its workers the grace to hear about the abort.
	cancelled := ctx.Done()
	for {
		select {
		case <-cancelled:
			cancelled = nil
			m.abort("the master was interrupted")
		case <-tick.C():
		case <-m.kick:
		}
		m.step(sendCtx, m.clock.Now())
		select {
		case <-m.ended:
		default:
			continue
		}
		if graceEnd.IsZero() {
			graceEnd = m.clock.Now().Add(m.cfg.ShutdownGrace)
			if m.cfg.OnShutdown != nil {
				m.mu.Lock()
				ok := m.phase == JobSucceeded
				m.mu.Unlock()
				m.cfg.OnShutdown(ok)
			}
		}
		if m.allHeardEnd() || !m.clock.Now().Before(graceEnd) {
			return
		}
	}
}

func (m *Master) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// abort ends the job unsuccessfully (no-op once ended).
func (m *Master) abort(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.abortLocked(reason)
}

func (m *Master) abortLocked(reason string) {
	if m.phase.Ended() {
		return
	}
	m.abortReason = reason
	m.setPhaseLocked(JobAborted)
	m.cfg.Logger.Error("aborting the job", "reason", reason)
}

// setPhaseLocked moves the job to p and closes ended when p ends the job.
func (m *Master) setPhaseLocked(p JobPhase) {
	now := m.clock.Now()
	m.metrics.jobPhaseDone(m.phase, now.Sub(m.phaseStart))
	m.phase, m.phaseStart = p, now
	if p.Ended() {
		close(m.ended)
	}
	m.persistLocked()
}

func (m *Master) allHeardEnd() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mb := range m.members {
		alive := m.clock.Since(mb.lastSeen) < m.cfg.LostAfter && mb.state != Failed
		if alive && !mb.heardEnd {
			return false
		}
	}
	return true
}

// InputBytes is the size of all workers' input, known once every worker
// has submitted its sample (0 before).
func (m *Master) InputBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, mb := range m.members {
		n += mb.inputBytes
	}
	return n
}

// Status returns the master's view of every registered worker.
func (m *Master) Status() []WorkerInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	out := make([]WorkerInfo, len(m.members))
	for i, mb := range m.members {
		out[i] = m.infoLocked(mb, now)
	}
	return out
}

func (m *Master) infoLocked(mb *member, now time.Time) WorkerInfo {
	return WorkerInfo{Index: mb.index, Address: mb.addr, Epoch: mb.epoch, State: mb.state,
		Progress: mb.progress, Message: mb.message, Phases: slices.Clone(mb.phases),
		Alive: now.Sub(mb.lastSeen) < m.cfg.LostAfter, LastSeen: now.Sub(mb.lastSeen)}
}

// Job returns the master's view of the job.
func (m *Master) Job() JobInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	j := JobInfo{JobID: m.cfg.JobID, Phase: m.phase, Workers: m.cfg.Workers, Registered: len(m.members),
		Elapsed: now.Sub(m.start), AbortReason: m.abortReason}
	for _, mb := range m.members {
		j.Members = append(j.Members, m.infoLocked(mb, now))
	}
	return j
}
