package dsort

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/lifecycle"
)

// MasterConfig configures a Master. Zero values are the documented defaults.
type MasterConfig struct {
	// Workers is the number of workers of the job (N). Required, >= 1.
	Workers int
	// Addr is the listen address. Default ":0" (all interfaces, any port).
	Addr string
	// Token, when set, must accompany every RPC (metadata gantry-token).
	Token string
	// JobID names the job. Default: random.
	JobID string
	// HeartbeatInterval is how often workers report. Default 500ms.
	HeartbeatInterval time.Duration
	// LostAfter is the silence after which a worker is reported lost (it
	// may still come back). Default 5s.
	LostAfter time.Duration
	// RejoinTimeout is the silence after which a worker that has not come
	// back aborts the job. Default 60s.
	RejoinTimeout time.Duration
	// PartitionSize bounds the expected size of one partition. Each worker
	// gets max(cores, ⌈input/(N·PartitionSize)⌉) partitions. Default 64 MiB.
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
	// state. Optional.
	OnChange func(WorkerInfo)
	// OnShutdown is called once, when the job has ended and the master
	// starts shutting down, with whether the job succeeded: the place for a
	// caller to arm a hard-deadline watchdog. Optional.
	OnShutdown func(succeeded bool)
	// Logger receives the master's log. Default: discard.
	Logger *slog.Logger
}

func (c *MasterConfig) validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("%w: need at least 1 worker, got %d", ErrConfig, c.Workers)
	}
	if c.Addr == "" {
		c.Addr = ":0"
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
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
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

// signal indexes member.sent.
const (
	sigConfig = iota
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
	cfg   MasterConfig
	start time.Time
	kick  chan struct{} // buffered(1): wake the control loop

	mu sync.Mutex // protects the fields below
	// members are in registration order. Invariant: len <= cfg.Workers.
	members []*member
	// bounds is nil until every worker's sample is in, then fixed.
	bounds []Boundary
	ppw    int // partitions per worker, set with bounds
	// shuffleOpen/mergeOpen: the barrier has opened (stays open).
	shuffleOpen, mergeOpen bool
	// ended is closed when the job succeeded or aborted; result says which.
	ended       chan struct{}
	succeeded   bool
	abortReason string
	announced   bool // OnRegistered called
}

// NewMaster validates cfg and returns a master; Run starts it.
func NewMaster(cfg MasterConfig) (*Master, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Master{cfg: cfg, kick: make(chan struct{}, 1), ended: make(chan struct{})}, nil
}

// JobID returns the job's ID.
func (m *Master) JobID() string { return m.cfg.JobID }

// Run listens, drives the job to its end and returns nil when it succeeded,
// an *AbortError when it was aborted (including when ctx ends first). Before
// returning it gives workers up to ShutdownGrace to hear the outcome, then
// stops the server within a bounded time.
func (m *Master) Run(ctx context.Context) error {
	m.start = time.Now()
	ln, err := net.Listen("tcp", m.cfg.Addr)
	if err != nil {
		return fmt.Errorf("dsort: master listen: %w", err)
	}
	g := &guard{token: m.cfg.Token, jobID: func() string { return m.cfg.JobID },
		open: map[string]bool{
			dsortpb.Master_RegisterWorker_FullMethodName: true,
			dsortpb.Master_GetJobStatus_FullMethodName:   true,
		}}
	srv := grpc.NewServer(g.serverOptions()...)
	dsortpb.RegisterMasterServer(srv, &masterRPC{m: m})
	serveDone := make(chan struct{})
	go func() { defer close(serveDone); srv.Serve(ln) }()
	port := ln.Addr().(*net.TCPAddr).Port
	addr := net.JoinHostPort(reachableIP(), strconv.Itoa(port))
	if h := hostOf(m.cfg.Addr); h != "" && h != "0.0.0.0" && h != "::" {
		addr = net.JoinHostPort(h, strconv.Itoa(port))
	}
	m.cfg.Logger.Info("master listening", "addr", addr, "job", m.cfg.JobID, "workers", m.cfg.Workers)
	if m.cfg.OnListen != nil {
		m.cfg.OnListen(addr)
	}

	tick := time.NewTicker(min(m.cfg.HeartbeatInterval/2, 100*time.Millisecond))
	defer tick.Stop()
	var graceEnd time.Time
	// cancelled is ctx.Done() until it fires, then nil: an interrupted
	// master still gives its workers the grace to hear about the abort.
	cancelled := ctx.Done()
loop:
	for {
		select {
		case <-cancelled:
			cancelled = nil
			m.abort("the master was interrupted")
		case <-tick.C:
		case <-m.kick:
		}
		m.step(time.Now())
		select {
		case <-m.ended:
			if graceEnd.IsZero() {
				graceEnd = time.Now().Add(m.cfg.ShutdownGrace)
				if m.cfg.OnShutdown != nil {
					m.mu.Lock()
					ok := m.succeeded
					m.mu.Unlock()
					m.cfg.OnShutdown(ok)
				}
			}
			if m.allHeardEnd() || !time.Now().Before(graceEnd) {
				break loop
			}
		default:
		}
	}
	lifecycle.StopWithin(2*time.Second, srv.GracefulStop, srv.Stop)
	<-serveDone
	m.mu.Lock()
	for _, mb := range m.members {
		if mb.conn != nil {
			mb.conn.Close()
		}
	}
	ok, reason := m.succeeded, m.abortReason
	m.mu.Unlock()
	if ok {
		m.cfg.Logger.Info("job succeeded", "elapsed", time.Since(m.start).Round(time.Millisecond))
		return nil
	}
	return &AbortError{Reason: reason}
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
	select {
	case <-m.ended:
		return
	default:
	}
	m.abortReason = reason
	close(m.ended)
	m.cfg.Logger.Error("aborting the job", "reason", reason)
}

func (m *Master) allHeardEnd() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mb := range m.members {
		alive := time.Since(mb.lastSeen) < m.cfg.LostAfter && mb.state != Failed
		if alive && !mb.heardEnd {
			return false
		}
	}
	return true
}

// step is one pass of the control loop: failure detection, boundaries,
// barriers and signals, completion.
func (m *Master) step(now time.Time) {
	type action struct {
		mb     *member
		epoch  int64
		client dsortpb.WorkerClient
		sig    int
		call   func(context.Context, dsortpb.WorkerClient) error
	}
	var acts []action
	m.mu.Lock()
	select {
	case <-m.ended:
		m.mu.Unlock()
		return
	default:
	}
	for _, mb := range m.members {
		silent := now.Sub(mb.lastSeen)
		if mb.state == Failed {
			m.abortLocked(fmt.Sprintf("worker %d (%s) failed: %s", mb.index, mb.addr, mb.errMsg))
			m.mu.Unlock()
			return
		}
		if silent > m.cfg.RejoinTimeout {
			m.abortLocked(fmt.Sprintf("worker %d (%s) has been silent for %s and did not come back (rejoin timeout %s)",
				mb.index, mb.addr, silent.Round(time.Second), m.cfg.RejoinTimeout))
			m.mu.Unlock()
			return
		}
		if silent > m.cfg.LostAfter && !mb.lost {
			mb.lost = true
			m.cfg.Logger.Warn("worker lost; waiting for it to come back", "worker", mb.index, "addr", mb.addr,
				"state", mb.state, "rejoin_timeout", m.cfg.RejoinTimeout)
		}
	}
	full := len(m.members) == m.cfg.Workers
	if full && m.bounds == nil && !slices.ContainsFunc(m.members, func(mb *member) bool { return !mb.sampled }) {
		m.computeBoundsLocked()
	}
	allAtLeast := func(s State) bool {
		return full && !slices.ContainsFunc(m.members, func(mb *member) bool { return mb.state < s || mb.state == Failed })
	}
	if !m.shuffleOpen && m.bounds != nil && allAtLeast(WaitingForShuffleSignal) {
		m.shuffleOpen = true
		m.cfg.Logger.Info("shuffle barrier open: every worker has sorted")
	}
	if !m.mergeOpen && m.shuffleOpen && allAtLeast(WaitingForMergeSignal) {
		m.mergeOpen = true
		m.cfg.Logger.Info("merge barrier open: every worker has its partitions' data")
	}
	if allAtLeast(Completed) {
		m.succeeded = true
		close(m.ended)
		m.cfg.Logger.Info("every worker completed")
		m.mu.Unlock()
		return
	}
	for _, mb := range m.members {
		if mb.lost || mb.client == nil {
			continue
		}
		switch {
		case m.bounds != nil && mb.state == WaitingForPartitionConfig && mb.sent[sigConfig] == unsent:
			pc := m.partitionConfigLocked(mb)
			acts = append(acts, action{mb, mb.epoch, mb.client, sigConfig, func(ctx context.Context, c dsortpb.WorkerClient) error {
				_, err := c.SetPartitionBoundaries(ctx, pc)
				return err
			}})
		case m.shuffleOpen && mb.state == WaitingForShuffleSignal && mb.sent[sigShuffle] == unsent:
			b := &dsortpb.Barrier{JobId: m.cfg.JobID, Epoch: mb.epoch, Peers: m.peersLocked(now)}
			acts = append(acts, action{mb, mb.epoch, mb.client, sigShuffle, func(ctx context.Context, c dsortpb.WorkerClient) error {
				_, err := c.StartShuffle(ctx, b)
				return err
			}})
		case m.mergeOpen && mb.state == WaitingForMergeSignal && mb.sent[sigMerge] == unsent:
			b := &dsortpb.Barrier{JobId: m.cfg.JobID, Epoch: mb.epoch}
			acts = append(acts, action{mb, mb.epoch, mb.client, sigMerge, func(ctx context.Context, c dsortpb.WorkerClient) error {
				_, err := c.StartMerge(ctx, b)
				return err
			}})
		}
	}
	for _, a := range acts {
		a.mb.sent[a.sig] = inflight
	}
	m.mu.Unlock()
	for _, a := range acts {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := a.call(ctx, a.client)
			m.mu.Lock()
			defer m.mu.Unlock()
			if a.mb.epoch != a.epoch {
				return // the worker restarted meanwhile; its new epoch starts unsent
			}
			if err != nil {
				a.mb.sent[a.sig] = unsent
				m.cfg.Logger.Debug("signal not delivered; will retry", "worker", a.mb.index, "signal", a.sig, "err", err)
				return
			}
			a.mb.sent[a.sig] = delivered
		}()
	}
}

func (m *Master) computeBoundsLocked() {
	keys := make([][]byte, len(m.members))
	recs := make([]int64, len(m.members))
	cores := 1
	var total int64
	for i, mb := range m.members {
		keys[i], recs[i] = mb.sample, mb.records
		cores = max(cores, mb.cores)
		total += mb.records * recSize
	}
	n := int64(m.cfg.Workers)
	ppw := int(max(int64(cores), (total+n*m.cfg.PartitionSize-1)/(n*m.cfg.PartitionSize)))
	m.ppw = ppw
	m.bounds = computeBoundaries(keys, recs, ppw*m.cfg.Workers)
	m.cfg.Logger.Info("partition boundaries computed", "partitions", ppw*m.cfg.Workers,
		"per_worker", ppw, "input_bytes", total)
}

func (m *Master) partitionConfigLocked(to *member) *dsortpb.PartitionConfig {
	pc := &dsortpb.PartitionConfig{JobId: m.cfg.JobID, Epoch: to.epoch,
		NumPartitions: int32(m.ppw * m.cfg.Workers), PartitionsPerWorker: int32(m.ppw)}
	for _, mb := range m.members {
		if mb.machine == to.machine {
			pc.WorkersOnMachine++
		}
	}
	for _, b := range m.bounds {
		pc.Boundaries = append(pc.Boundaries, &dsortpb.Boundary{Key: b.Key[:], Worker: int32(b.Worker), Count: b.Count})
	}
	return pc
}

func (m *Master) peersLocked(now time.Time) []*dsortpb.Peer {
	out := make([]*dsortpb.Peer, len(m.members))
	for i, mb := range m.members {
		out[i] = &dsortpb.Peer{Index: int32(i), Address: mb.addr, Epoch: mb.epoch,
			State: stateToPB(mb.state), Alive: now.Sub(mb.lastSeen) < m.cfg.LostAfter}
	}
	return out
}

// InputBytes is the size of all workers' input, known once every worker
// has submitted its sample (0 before).
func (m *Master) InputBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, mb := range m.members {
		n += mb.records * recSize
	}
	return n
}

// Status returns the master's view of every registered worker.
func (m *Master) Status() []WorkerInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
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

// masterRPC is the gRPC face of a Master.
type masterRPC struct {
	dsortpb.UnimplementedMasterServer
	m *Master
}

func (r *masterRPC) RegisterWorker(ctx context.Context, req *dsortpb.RegisterRequest) (*dsortpb.RegisterReply, error) {
	m := r.m
	host := hostOf(req.GetAddress())
	if host == "" || req.GetOutputDir() == "" || len(req.GetInputDirs()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "dsort: register: address, input dirs and output dir are required")
	}
	id := identity(host, req.GetInputDirs(), req.GetOutputDir())
	conn, err := dial(req.GetAddress(), m.cfg.Token)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	m.mu.Lock()
	select {
	case <-m.ended:
		m.mu.Unlock()
		conn.Close()
		return nil, status.Error(codes.FailedPrecondition, "dsort: the job has ended")
	default:
	}
	idx := slices.IndexFunc(m.members, func(mb *member) bool { return mb.identity == id })
	var mb *member
	switch {
	case idx >= 0:
		mb = m.members[idx]
		if mb.conn != nil {
			mb.conn.Close()
		}
		mb.epoch++
		m.cfg.Logger.Info("worker came back", "worker", mb.index, "addr", req.GetAddress(), "epoch", mb.epoch,
			"was", mb.state)
	case len(m.members) < m.cfg.Workers:
		mb = &member{index: len(m.members), identity: id, host: host, epoch: 1}
		m.members = append(m.members, mb)
		m.cfg.Logger.Info("worker registered", "worker", mb.index, "addr", req.GetAddress())
	default:
		m.mu.Unlock()
		conn.Close()
		return nil, status.Errorf(codes.ResourceExhausted,
			"dsort: the job already has its %d workers and %s (inputs %v, output %s) is not one of them",
			m.cfg.Workers, req.GetAddress(), req.GetInputDirs(), req.GetOutputDir())
	}
	mb.addr, mb.conn, mb.client = req.GetAddress(), conn, dsortpb.NewWorkerClient(conn)
	mb.machine = cmp.Or(req.GetMachineId(), host)
	mb.cores, mb.inputBytes = int(max(req.GetCores(), 1)), req.GetInputBytes()
	mb.state, mb.progress, mb.message, mb.errMsg, mb.phases = Initializing, 0, "registered", "", nil
	mb.lastSeen, mb.lost, mb.sent, mb.heardEnd = time.Now(), false, [numSignals]sendState{}, false
	reply := &dsortpb.RegisterReply{JobId: m.cfg.JobID, Index: int32(mb.index), Epoch: mb.epoch,
		NumWorkers: int32(m.cfg.Workers), NeedSample: !mb.sampled,
		HeartbeatIntervalMs: m.cfg.HeartbeatInterval.Milliseconds()}
	var ips []string
	if len(m.members) == m.cfg.Workers && !m.announced {
		m.announced = true
		for _, x := range m.members {
			ips = append(ips, x.host)
		}
	}
	m.mu.Unlock()
	if ips != nil && m.cfg.OnRegistered != nil {
		m.cfg.OnRegistered(ips)
	}
	m.wake()
	return reply, nil
}

// memberFor returns the member for (index, epoch), or a gRPC error.
func (m *Master) memberForLocked(index int32, epoch int64) (*member, error) {
	if index < 0 || int(index) >= len(m.members) {
		return nil, status.Errorf(codes.NotFound, "dsort: no worker %d", index)
	}
	mb := m.members[index]
	if epoch != mb.epoch {
		return nil, status.Errorf(codes.FailedPrecondition, "dsort: worker %d epoch %d is superseded by epoch %d",
			index, epoch, mb.epoch)
	}
	return mb, nil
}

func (r *masterRPC) SubmitSample(ctx context.Context, req *dsortpb.SampleRequest) (*dsortpb.Ack, error) {
	m := r.m
	if len(req.GetKeys())%keySize != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "dsort: sample of %d bytes is not whole %d-byte keys", len(req.GetKeys()), keySize)
	}
	m.mu.Lock()
	defer m.wake()
	defer m.mu.Unlock()
	mb, err := m.memberForLocked(req.GetIndex(), req.GetEpoch())
	if err != nil {
		return nil, err
	}
	if !mb.sampled {
		mb.sample, mb.records, mb.sampled = slices.Clone(req.GetKeys()), req.GetRecords(), true
	}
	return &dsortpb.Ack{}, nil
}

func (r *masterRPC) Heartbeat(ctx context.Context, req *dsortpb.HeartbeatRequest) (*dsortpb.HeartbeatReply, error) {
	m := r.m
	m.mu.Lock()
	mb, err := m.memberForLocked(req.GetIndex(), req.GetEpoch())
	if err != nil {
		m.mu.Unlock()
		if status.Code(err) == codes.FailedPrecondition {
			return &dsortpb.HeartbeatReply{ShouldAbort: true, Reason: "a newer process of this worker has registered"}, nil
		}
		return nil, err
	}
	now := time.Now()
	if mb.lost {
		m.cfg.Logger.Info("worker is back", "worker", mb.index)
	}
	mb.lastSeen, mb.lost = now, false
	newState := stateFromPB(req.GetState())
	changed := newState != mb.state
	mb.state, mb.progress, mb.message, mb.errMsg = newState, req.GetProgress(), req.GetMessage(), req.GetError()
	mb.phases = mb.phases[:0]
	for _, p := range req.GetPhases() {
		mb.phases = append(mb.phases, PhaseTime{State: stateFromPB(p.GetState()),
			Duration: time.Duration(p.GetDurationMs()) * time.Millisecond, Done: p.GetDone()})
	}
	reply := &dsortpb.HeartbeatReply{}
	select {
	case <-m.ended:
		reply.ShouldAbort, reply.JobSucceeded, reply.Reason = true, m.succeeded, m.abortReason
		if m.succeeded {
			reply.Reason = "the job succeeded"
		}
		mb.heardEnd = true
	default:
	}
	info := m.infoLocked(mb, now)
	m.mu.Unlock()
	if changed {
		m.cfg.Logger.Info("worker state", "worker", info.Index, "state", info.State, "progress", fmt.Sprintf("%.0f%%", info.Progress))
		if m.cfg.OnChange != nil {
			m.cfg.OnChange(info)
		}
		m.wake()
	}
	return reply, nil
}

func (r *masterRPC) GetPeers(ctx context.Context, req *dsortpb.PeersRequest) (*dsortpb.PeersReply, error) {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	return &dsortpb.PeersReply{Peers: r.m.peersLocked(time.Now())}, nil
}

func (r *masterRPC) GetJobStatus(ctx context.Context, req *dsortpb.JobStatusRequest) (*dsortpb.JobStatus, error) {
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	js := &dsortpb.JobStatus{JobId: m.cfg.JobID, NumWorkers: int32(m.cfg.Workers), Registered: int32(len(m.members)),
		ElapsedMs: now.Sub(m.start).Milliseconds(), AbortReason: m.abortReason}
	switch {
	case m.succeeded:
		js.Phase = "succeeded"
	case m.abortReason != "":
		js.Phase = "aborted"
	case len(m.members) < m.cfg.Workers:
		js.Phase = "registering"
	case m.mergeOpen:
		js.Phase = "merging"
	case m.shuffleOpen:
		js.Phase = "shuffling"
	case m.bounds != nil:
		js.Phase = "sorting"
	default:
		js.Phase = "sampling"
	}
	for _, mb := range m.members {
		js.Workers = append(js.Workers, workerStatusPB(m.infoLocked(mb, now)))
	}
	return js, nil
}

func workerStatusPB(w WorkerInfo) *dsortpb.WorkerStatus {
	ws := &dsortpb.WorkerStatus{Index: int32(w.Index), Epoch: w.Epoch, State: stateToPB(w.State),
		CurrentPhase: phaseOf(w.State), ProgressPercentage: w.Progress, Message: w.Message,
		Address: w.Address, Alive: w.Alive, LastSeenMs: w.LastSeen.Milliseconds()}
	for _, p := range w.Phases {
		ws.Phases = append(ws.Phases, &dsortpb.PhaseTime{State: stateToPB(p.State), DurationMs: p.Duration.Milliseconds(), Done: p.Done})
	}
	return ws
}

// WorkerInfoFromPB converts a status message (from GetJobStatus) back.
func WorkerInfoFromPB(ws *dsortpb.WorkerStatus) WorkerInfo {
	w := WorkerInfo{Index: int(ws.GetIndex()), Address: ws.GetAddress(), Epoch: ws.GetEpoch(),
		State: stateFromPB(ws.GetState()), Progress: ws.GetProgressPercentage(), Message: ws.GetMessage(),
		Alive: ws.GetAlive(), LastSeen: time.Duration(ws.GetLastSeenMs()) * time.Millisecond}
	for _, p := range ws.GetPhases() {
		w.Phases = append(w.Phases, PhaseTime{State: stateFromPB(p.GetState()),
			Duration: time.Duration(p.GetDurationMs()) * time.Millisecond, Done: p.GetDone()})
	}
	return w
}
