package dsort

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
)

// masterRPC is the gRPC face of a Master: it converts messages (pbconv.go),
// calls the master's logic and maps its errors to status codes (statusOf).
type masterRPC struct {
	dsortpb.UnimplementedMasterServer
	m *Master
}

func (r *masterRPC) RegisterWorker(ctx context.Context, req *dsortpb.RegisterRequest) (*dsortpb.RegisterReply, error) {
	reply, err := r.m.register(req)
	return reply, statusOf(err)
}

func (r *masterRPC) SubmitSample(ctx context.Context, req *dsortpb.SampleRequest) (*dsortpb.Ack, error) {
	if err := r.m.submitSample(int(req.GetIndex()), req.GetEpoch(), req.GetKeys(), req.GetRecords()); err != nil {
		return nil, statusOf(err)
	}
	return &dsortpb.Ack{}, nil
}

func (r *masterRPC) Heartbeat(ctx context.Context, req *dsortpb.HeartbeatRequest) (*dsortpb.HeartbeatReply, error) {
	reply, err := r.m.heartbeat(ctx, req)
	return reply, statusOf(err)
}

func (r *masterRPC) GetPeers(ctx context.Context, req *dsortpb.PeersRequest) (*dsortpb.PeersReply, error) {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	return &dsortpb.PeersReply{Peers: peersToPB(r.m.peersLocked(r.m.clock.Now()))}, nil
}

func (r *masterRPC) GetJobStatus(ctx context.Context, req *dsortpb.JobStatusRequest) (*dsortpb.JobStatus, error) {
	return jobInfoToPB(r.m.Job()), nil
}

// identity is what makes a registration the same worker as an earlier
// one: its host, input dirs and output dir.
func identity(host string, in []string, out string) string {
	return host + "\x00" + strings.Join(in, "\x00") + "\x00\x00" + out
}

// register takes a worker into the job: a new slot while there are fewer
// than N, the same slot with a new epoch for a known identity.
func (m *Master) register(req *dsortpb.RegisterRequest) (*dsortpb.RegisterReply, error) {
	host := hostOf(req.GetAddress())
	if host == "" || req.GetOutputDir() == "" || len(req.GetInputDirs()) == 0 {
		return nil, errorf(ErrBadRequest, "dsort: register: address, input dirs and output dir are required")
	}
	if job := formatSpec(m.cfg.Lines); req.GetFormat() != job {
		return nil, errorf(ErrBadRequest, "dsort: this job sorts %s; the worker sorts %s: give the worker the master's --format and ordering options",
			describeFormat(job), describeFormat(req.GetFormat()))
	}
	conn, err := dialMetered(req.GetAddress(), m.creds, m.metrics)
	if err != nil {
		return nil, errorf(ErrBadRequest, "%v", err)
	}
	m.mu.Lock()
	mb, err := m.slotLocked(req, host)
	if err != nil {
		m.mu.Unlock()
		conn.Close()
		return nil, err
	}
	mb.addr, mb.conn, mb.client = req.GetAddress(), conn, dsortpb.NewWorkerClient(conn)
	mb.machine = cmp.Or(req.GetMachineId(), host)
	mb.cores, mb.inputBytes = int(max(req.GetCores(), 1)), req.GetInputBytes()
	mb.state, mb.progress, mb.message, mb.errMsg, mb.phases = Initializing, 0, "registered", "", nil
	mb.lastSeen, mb.lost, mb.sent, mb.heardEnd = m.clock.Now(), false, [numSignals]sendState{}, false
	reply := &dsortpb.RegisterReply{JobId: m.cfg.JobID, Index: int32(mb.index), Epoch: mb.epoch,
		NumWorkers: int32(m.cfg.Workers), NeedSample: !mb.sampled,
		HeartbeatIntervalMs: m.cfg.HeartbeatInterval.Milliseconds()}
	m.persistLocked()
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

// checkOutputLocked refuses a new worker whose S3 output prefix another
// worker of the job writes, or one inside the other's (a bucket's root
// holds them all): each commit deletes the partitions of its output that
// are not its own, so the two would delete each other's. A URL names one
// place wherever the worker runs; a local path does not (containers mount
// their own dirs at one path, and one machine-id can stand for many), so a
// local dir is guarded by the worker's lock on it (Worker.lockOutput).
func (m *Master) checkOutputLocked(out string) error {
	if !isS3(out) {
		return nil
	}
	place, err := s3Place(out)
	if err != nil {
		return errorf(ErrBadRequest, "dsort: register: %v", err)
	}
	for _, mb := range m.members {
		if !isS3(mb.output) {
			continue
		}
		if other, err := s3Place(mb.output); err == nil && s3Overlap(place, other) {
			return errorf(ErrBadRequest, "dsort: worker %d (%s) already writes its partitions to %s, the same prefix as %s or one inside the other: give each worker an output of its own (one's commit would delete the other's partitions)",
				mb.index, mb.addr, mb.output, out)
		}
	}
	return nil
}

// slotLocked returns the member slot for a registration: the known one
// with its epoch bumped (a restarted worker), or a new one.
func (m *Master) slotLocked(req *dsortpb.RegisterRequest, host string) (*member, error) {
	id := identity(host, req.GetInputDirs(), req.GetOutputDir())
	if m.phase.Ended() {
		known := slices.IndexFunc(m.members, func(mb *member) bool { return mb.identity == id })
		if m.phase == JobSucceeded && known >= 0 {
			return nil, errorf(ErrJobSucceeded, "dsort: job %s succeeded; worker %d's partitions are final", m.cfg.JobID, known)
		}
		return nil, errorf(ErrJobEnded, "dsort: job %s has ended (%s)", m.cfg.JobID, m.phase)
	}
	if idx := slices.IndexFunc(m.members, func(mb *member) bool { return mb.identity == id }); idx >= 0 {
		mb := m.members[idx]
		if mb.conn != nil {
			mb.conn.Close()
		}
		mb.epoch++
		m.metrics.rejoin()
		m.cfg.Logger.Info("worker came back", "worker", mb.index, "addr", req.GetAddress(), "epoch", mb.epoch,
			"was", mb.state)
		return mb, nil
	}
	if len(m.members) >= m.cfg.Workers {
		return nil, errorf(ErrJobFull, "dsort: the job already has its %d workers and %s (inputs %v, output %s) is not one of them",
			m.cfg.Workers, req.GetAddress(), req.GetInputDirs(), req.GetOutputDir())
	}
	if err := m.checkShareLocked(req.GetInputDirs()); err != nil {
		return nil, err
	}
	if err := m.checkOutputLocked(req.GetOutputDir()); err != nil {
		return nil, err
	}
	mb := &member{index: len(m.members), identity: id, host: host, epoch: 1,
		inputs: req.GetInputDirs(), output: req.GetOutputDir()}
	m.members = append(m.members, mb)
	m.cfg.Logger.Info("worker registered", "worker", mb.index, "addr", req.GetAddress())
	return mb, nil
}

// checkShareLocked refuses a worker whose --share does not fit the job's
// other workers on the same S3 inputs: N must be the job's worker count, K
// not taken, and the inputs' listing the same (an object added or changed
// between two workers' starts would have records read twice or never).
func (m *Master) checkShareLocked(in []string) error {
	share, listing, inputs := splitShare(in)
	if share == "" {
		return nil
	}
	if _, n, _ := strings.Cut(share, "/"); n != strconv.Itoa(m.cfg.Workers) {
		return errorf(ErrBadRequest, "dsort: --share %s: this job has %d workers; give them the shares 0/%d … %d/%d",
			share, m.cfg.Workers, m.cfg.Workers, m.cfg.Workers-1, m.cfg.Workers)
	}
	for _, mb := range m.members {
		s, l, ins := splitShare(mb.inputs)
		if !slices.Equal(ins, inputs) {
			continue
		}
		if s == share {
			return errorf(ErrBadRequest, "dsort: --share %s is worker %d's already; each worker takes another share", share, mb.index)
		}
		if l != listing {
			return errorf(ErrBadRequest, "dsort: the S3 inputs %v list other objects than worker %d saw (changed between their starts?); start the job again", inputs, mb.index)
		}
	}
	return nil
}

// splitShare parses a registration's inputs: the share ("K/N"), the S3
// listing's digest, and the -I list.
func splitShare(in []string) (share, listing string, inputs []string) {
	for _, s := range in {
		if v, ok := strings.CutPrefix(s, "share="); ok {
			share = v
		} else if v, ok := strings.CutPrefix(s, "s3-listing="); ok {
			listing = v
		} else {
			inputs = append(inputs, s)
		}
	}
	return share, listing, inputs
}

// memberForLocked returns the member for (index, epoch): ErrUnknownWorker
// for an index the job does not have, ErrStaleEpoch for a superseded epoch.
func (m *Master) memberForLocked(index int, epoch int64) (*member, error) {
	if index < 0 || index >= len(m.members) {
		return nil, errorf(ErrUnknownWorker, "dsort: no worker %d", index)
	}
	mb := m.members[index]
	if epoch != mb.epoch {
		return nil, errorf(ErrStaleEpoch, "dsort: worker %d epoch %d is superseded by epoch %d", index, epoch, mb.epoch)
	}
	return mb, nil
}

// submitSample stores a worker's sample (once: sampling is deterministic,
// so a restarted worker's sample would be the same).
func (m *Master) submitSample(index int, epoch int64, keys []byte, records int64) error {
	if _, err := splitSample(m.cfg.Lines != nil, keys); err != nil {
		return errorf(ErrBadRequest, "dsort: %v", err)
	}
	m.mu.Lock()
	defer m.wake()
	defer m.mu.Unlock()
	mb, err := m.memberForLocked(index, epoch)
	if err != nil {
		return err
	}
	if !mb.sampled {
		mb.sample, mb.records, mb.sampled = slices.Clone(keys), records, true
		m.persistLocked()
	}
	return nil
}

// heartbeat records a worker's report and tells it whether the job has
// ended. A superseded process is told to stop.
//
// A worker that was already Completed only waits to hear the job's end:
// its heartbeat is held until the job ends (a long poll, at most
// endPollFor), so that every worker, and then the master, exits within
// moments of the last worker completing rather than a heartbeat interval
// later. The heartbeat that first reports Completed is answered at once:
// the worker learns that the master knows before it hears the end.
func (m *Master) heartbeat(ctx context.Context, req *dsortpb.HeartbeatRequest) (*dsortpb.HeartbeatReply, error) {
	m.mu.Lock()
	mb, err := m.memberForLocked(int(req.GetIndex()), req.GetEpoch())
	if err != nil {
		m.mu.Unlock()
		if errors.Is(err, ErrStaleEpoch) {
			return &dsortpb.HeartbeatReply{ShouldAbort: true, Reason: "a newer process of this worker has registered"}, nil
		}
		return nil, err
	}
	now := m.clock.Now()
	if mb.lost {
		m.cfg.Logger.Info("worker is back", "worker", mb.index)
	}
	mb.lastSeen, mb.lost = now, false
	newState := stateFromPB(req.GetState())
	changed := newState != mb.state
	stale := changed && mb.state.IsTerminal()
	if stale {
		// An earlier report of this process that the worker gave up
		// waiting for (its context ended), overtaken on the way by its
		// last one: within an epoch no state follows Failed or Completed
		// (a restarted worker registers a new epoch), so the report is
		// stale and the terminal state stands.
		changed = false
	} else {
		mb.state, mb.progress, mb.message, mb.errMsg = newState, req.GetProgress(), req.GetMessage(), req.GetError()
		mb.phases = phasesFromPB(req.GetPhases())
	}
	if changed {
		m.persistLocked()
	}
	reply := &dsortpb.HeartbeatReply{}
	m.endReplyLocked(mb, reply)
	// A report with an error is a completed worker's last (it is shutting
	// down, Worker.supervise's fail): answered at once.
	hold := !stale && !changed && newState == Completed && req.GetError() == "" && !reply.ShouldAbort
	info := m.infoLocked(mb, now)
	m.mu.Unlock()
	if changed {
		// Debug: OnChange reports it (the CLI prints a line per change),
		// and the worker logs its own transitions.
		m.cfg.Logger.Debug("worker state", "worker", info.Index, "state", info.State, "progress", fmt.Sprintf("%.0f%%", info.Progress))
		if m.cfg.OnChange != nil {
			m.cfg.OnChange(info)
		}
		m.wake()
	}
	if hold {
		m.awaitEnd(ctx, mb, req.GetEpoch(), reply)
	}
	return reply, nil
}

// endReplyLocked fills reply with the job's end, if it has ended, and
// notes that mb heard it.
func (m *Master) endReplyLocked(mb *member, reply *dsortpb.HeartbeatReply) {
	if !m.phase.Ended() {
		return
	}
	ok := m.phase == JobSucceeded
	reply.ShouldAbort, reply.JobSucceeded, reply.Reason = true, ok, m.abortReason
	if ok {
		reply.Reason = "the job succeeded"
	}
	mb.heardEnd = true
}

// awaitEnd holds a completed worker's heartbeat until the job ends, the
// worker gives up on the call or endPollFor passes, and then fills reply
// with the end if it came; the master's loop hears at once that mb heard
// it. A process superseded meanwhile (a newer one of the worker registered)
// gets the plain reply: its next heartbeat is told to stop.
func (m *Master) awaitEnd(ctx context.Context, mb *member, epoch int64, reply *dsortpb.HeartbeatReply) {
	t := m.clock.NewTimer(m.endPollFor())
	defer t.Stop()
	select {
	case <-m.ended:
	case <-ctx.Done():
		return
	case <-t.C():
	}
	m.mu.Lock()
	if mb.epoch == epoch {
		m.endReplyLocked(mb, reply)
	}
	m.mu.Unlock()
	if reply.ShouldAbort {
		m.wake()
	}
}

// endPollFor is the longest a completed worker's heartbeat is held: a
// heartbeat interval, and well within LostAfter, which counts from the
// heartbeat's arrival.
func (m *Master) endPollFor() time.Duration {
	return min(m.cfg.HeartbeatInterval, m.cfg.LostAfter/4)
}
