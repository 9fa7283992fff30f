package dsort

import (
	"context"
	"sync"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
)

// supervisor holds what supervise's exits share: the master ended the job
// (end), or this worker failed, lost the master or was interrupted (fail).
type supervisor struct {
	w         *Worker
	asg       assignment
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
		return s.w.out.commit(s.asg.jobID, s.asg.index)
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
	s.w.report(context.Background(), s.asg, 2*time.Second, cause.Error())
	return cause
}

// cleanup runs on every exit of Run that can run code, after the server
// has stopped: it removes the staged partitions of a job that did not
// commit (an aborted job leaves no complete-looking output; the previous
// output stays), frees the input kept sorted in memory, then removes the
// worker's temp dir and releases its lock.
func (w *Worker) cleanup(errp *error) {
	if job := w.assigned().jobID; *errp != nil && job != "" {
		w.out.discard(job)
	}
	w.pieces.close()
	w.dir.close()
}
