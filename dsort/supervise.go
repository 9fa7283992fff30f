package dsort

import (
	"context"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/internal/clock"
)

// supervise runs the phases and the heartbeats, each in its own goroutine,
// until the master ends the job, this worker fails, the master is lost or
// ctx ends (the exits are in shutdown.go). It hands sd what stops the
// heartbeats and waits for the phases: Run's shutdown runs them, each
// within its bound.
func (w *Worker) supervise(ctx context.Context, asg assignment, interval time.Duration, needSample bool, sd *shutdown) error {
	hbCtx, cancelHB := context.WithCancel(context.Background())
	hb := w.newHeartbeater(asg, interval)
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); hb.run(hbCtx) }()
	stopHB := func() { cancelHB(); <-hbDone }

	jobCtx, cancelJob := context.WithCancel(ctx)
	phases := make(chan error, 1)
	go func() { phases <- w.runPhases(jobCtx, asg, needSample) }()
	s := &supervisor{w: w, asg: asg, cancelJob: cancelJob, phases: phases, stopHB: stopHB, sd: sd}
	for {
		select {
		case perr := <-s.phases:
			s.phases = nil
			if perr == nil {
				w.track.logger.Info("all phases completed; waiting for the master's go to exit")
				continue
			}
			if ctx.Err() != nil {
				perr = ctx.Err()
			}
			return s.fail(perr)
		case rep := <-hb.end:
			return s.end(rep)
		case lerr := <-hb.lost:
			return s.fail(lerr)
		case <-ctx.Done():
			return s.fail(ctx.Err())
		}
	}
}

// heartbeater reports the worker's state every interval and at every
// transition (kick), from its own goroutine, so that CPU-heavy phases never
// delay it. Its outputs: end gets the master's reply once it says the job
// is over (should_abort), lost gets ErrMasterLost once the master has been
// unreachable for longer than timeout. Either ends run, as does ctx.
type heartbeater struct {
	clock    clock.Clock
	interval time.Duration
	timeout  time.Duration // MasterTimeout
	// send sends one heartbeat within rpcTimeout and returns the state it
	// reported.
	send    func(ctx context.Context, rpcTimeout time.Duration) (State, *dsortpb.HeartbeatReply, error)
	lostErr func(last error) error // why the master counts as lost
	kick    <-chan struct{}
	metrics *metrics
	fault   func(ctx context.Context, point string)

	end  chan *dsortpb.HeartbeatReply // buffered(1)
	lost chan error                   // buffered(1)
}

func (w *Worker) newHeartbeater(asg assignment, interval time.Duration) *heartbeater {
	return &heartbeater{
		clock: w.clock, interval: interval, timeout: w.cfg.MasterTimeout,
		send: func(ctx context.Context, timeout time.Duration) (State, *dsortpb.HeartbeatReply, error) {
			st := w.sm.State()
			rep, err := w.reportState(ctx, asg, st, timeout, "")
			return st, rep, err
		},
		lostErr: func(last error) error {
			return fmt.Errorf("%w: no reply from %s for %s: %s; the output directory %s was left as it was",
				ErrMasterLost, w.cfg.Master, w.cfg.MasterTimeout, statusMessage(last), w.cfg.Output)
		},
		kick: w.kick, metrics: w.metrics, fault: w.fault,
		end: make(chan *dsortpb.HeartbeatReply, 1), lost: make(chan error, 1),
	}
}

// endPollGap is the pause between a completed worker's heartbeats, each of
// which the master holds until the job ends (or a heartbeat interval).
const endPollGap = 5 * time.Millisecond

func (h *heartbeater) run(ctx context.Context) {
	interval := h.interval
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	lastOK := h.clock.Now()
	for {
		// Armed before the heartbeat goes out: its time counts toward the
		// interval (and a test's fake clock finds it armed).
		t := h.clock.NewTimer(interval)
		soon, done := h.beat(ctx, interval, &lastOK)
		if done {
			t.Stop()
			return
		}
		if soon {
			t.Stop()
			t = h.clock.NewTimer(min(endPollGap, interval))
		}
		select {
		case <-ctx.Done():
		case <-t.C():
		case <-h.kick:
		}
		t.Stop()
		if ctx.Err() != nil {
			return
		}
	}
}

// beat sends one heartbeat and acts on the outcome. It reports done when
// the heartbeats are over (the job's end heard, the master lost, or ctx
// done), and soon when the next one goes out after endPollGap rather than
// the interval: a completed worker only waits for the job's end, which
// the master tells it as soon as it comes, holding the heartbeat of a
// worker already Completed until then (Master.heartbeat). So, once the
// master has answered, it asks again almost at once: the master's hold
// paces the asking. After a failed heartbeat, the interval.
func (h *heartbeater) beat(ctx context.Context, interval time.Duration, lastOK *time.Time) (soon, done bool) {
	// Silence is measured to when this heartbeat went out: what happens
	// while it is in flight (a fake clock's test moving time) cannot make
	// a beat that started within the timeout the one that gives up.
	began := h.clock.Now()
	sent, rep, err := h.send(ctx, max(4*interval, 2*time.Second))
	if err != nil && ctx.Err() == nil {
		h.metrics.heartbeatMissed()
	}
	switch {
	case err == nil:
		*lastOK = h.clock.Now()
		if rep.GetShouldAbort() {
			h.end <- rep
			return false, true
		}
		if sent == Completed {
			h.fault(ctx, "completed") // the master knows; the job's end is not heard yet
			return true, false
		}
	case ctx.Err() != nil:
		return false, true
	case began.Sub(*lastOK) > h.timeout:
		h.lost <- h.lostErr(err)
		return false, true
	}
	return false, false
}

// report sends the master one heartbeat: the worker's state, progress,
// message and phase times, and errMsg (or, in Failed, the reason of the
// last transition).
func (w *Worker) report(ctx context.Context, asg assignment, timeout time.Duration, errMsg string) (*dsortpb.HeartbeatReply, error) {
	return w.reportState(ctx, asg, w.sm.State(), timeout, errMsg)
}

// reportState is report of state st.
func (w *Worker) reportState(ctx context.Context, asg assignment, st State, timeout time.Duration, errMsg string) (*dsortpb.HeartbeatReply, error) {
	req := &dsortpb.HeartbeatRequest{JobId: asg.jobID, Index: int32(asg.index), Epoch: asg.epoch, State: stateToPB(st),
		Progress: w.track.progress(st), Message: w.track.message(st), Error: errMsg}
	if st == Failed && errMsg == "" {
		if h := w.sm.History(); len(h) > 0 {
			req.Error = h[len(h)-1].Reason
		}
	}
	req.Phases = phasesToPB(w.track.phaseTimes())
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return asg.master.Heartbeat(cctx, req)
}
