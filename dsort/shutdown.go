package dsort

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/lifecycle"
)

// Seed 003's shutdown. When the job ends (the master's word in a
// heartbeat reply: "Received shutdown signal from Master") or this worker
// fails, the supervisor arms the caller's watchdog (OnShutdown) and Run's
// exit runs the seed's stop(): "Shutting down...", then each step below
// within its own bound, then "Shutdown complete". A step still running at
// its bound is cut off (lifecycle.RunSteps) and the next one starts, so a
// hang costs that step's bound, not the process; everything hung at once
// adds up to more than the CLI's 15 s watchdog, which then ends the
// process. The bounds are the seed's (file cleanup, "~1s" there, gets 3 s).
//
//	step       bound  seed step          what it does
//	heartbeat  2 s    heartbeat stop     stop the heartbeats; after a failure, the last report (Failed)
//	server     3 s    gRPC server        graceful stop for 2 s, then forced
//	master     2 s    master channel     close the connection to the master
//	shuffle    5 s    shuffle cleanup    wait for the cancelled phases: fetch streams, merges
//	files      3 s    file cleanup       remove an uncommitted job's staged partitions and the temp dir
//	memory     3 s    executor           free the sorted input kept in memory (only once the server stopped)
//
// Each step calls the fault hook at "shutdown-<step>" first (with a
// context that never ends), so tests can make any step hang.
var shutdownBounds = map[string]time.Duration{
	"heartbeat": 2 * time.Second,
	"server":    3 * time.Second,
	"master":    2 * time.Second,
	"shuffle":   5 * time.Second,
	"files":     3 * time.Second,
	"memory":    3 * time.Second,
}

// shutdownOrder is the order Run's exit runs the steps in (the seed's).
var shutdownOrder = []string{"heartbeat", "server", "master", "shuffle", "files", "memory"}

// shutdown collects what Run started, as it starts it, and stops it on
// Run's exit. A nil part has nothing to stop and its step is skipped.
type shutdown struct {
	w         *Worker
	heartbeat func()    // stops the heartbeats (and sends the last report)
	server    func()    // stops the gRPC server
	conn      io.Closer // the connection to the master
	phases    func()    // waits for the (cancelled) phases to return
	// succeeded: the master declared the job succeeded and this process
	// committed it, or tried to: its staged partitions are the job's
	// final output and are never discarded (the next process of this
	// worker finishes a failed commit, alreadySucceeded).
	succeeded bool
}

// run is seed 003's stop(). errp is Run's result: an uncommitted job's
// staged partitions are removed unless it is nil (or the job succeeded).
//
// What a step cut off at its bound may still be doing decides what the
// later steps leave alone: the phases (a merge stuck in a write) may
// still read the sorted input and write staged partitions and temp
// files, and streams of a server not yet stopped may read the sorted
// input. So the files step keeps the temp dir (and its lock) and the
// staged files unless the phases have returned, and the memory step frees
// the sorted input only once both the server and the phases are done; what
// is left goes with the process (the next start sweeps the temp dir and
// removes staged files).
func (sd *shutdown) run(errp *error) {
	w := sd.w
	log := w.track.logger
	log.Info("Shutting down...")
	start := time.Now()
	var serverStopped, phasesDone atomic.Bool
	if sd.server == nil {
		serverStopped.Store(true)
	}
	if sd.phases == nil {
		phasesDone.Store(true)
	}
	parts := map[string]func(){
		"heartbeat": sd.heartbeat,
		"files": func() {
			if phasesDone.Load() {
				w.cleanupFiles(*errp, sd.succeeded)
				w.unlockOutput()
			}
		},
		"memory": func() {
			if serverStopped.Load() && phasesDone.Load() {
				w.pieces.close()
			}
		},
	}
	if sd.phases != nil {
		parts["shuffle"] = func() { sd.phases(); phasesDone.Store(true) }
	}
	if sd.server != nil {
		parts["server"] = func() { sd.server(); serverStopped.Store(true) }
	}
	if sd.conn != nil {
		parts["master"] = func() { sd.conn.Close() }
	}
	var steps []lifecycle.Step
	for _, name := range shutdownOrder {
		if fn := parts[name]; fn != nil {
			steps = append(steps, lifecycle.Step{Name: name, Bound: shutdownBounds[name], Run: func() {
				w.fault(context.Background(), "shutdown-"+name)
				fn()
			}})
		}
	}
	cut := lifecycle.RunSteps(func(s lifecycle.Step) {
		log.Warn("shutdown step cut off at its bound", "step", s.Name, "bound", s.Bound)
	}, steps...)
	log.Info("Shutdown complete", "elapsed", time.Since(start).Round(time.Millisecond), "cut_off", cut)
}

// supervisor holds what supervise's exits share: the master ended the job
// (end), or this worker failed, lost the master or was interrupted (fail).
type supervisor struct {
	w         *Worker
	asg       assignment
	cancelJob func()
	phases    <-chan error // nil once runPhases has returned
	stopHB    func()       // stops the heartbeats and waits for them (safe twice)
	sd        *shutdown
	once      sync.Once
}

func (s *supervisor) shuttingDown(ok bool) {
	if s.w.cfg.OnShutdown != nil {
		s.once.Do(func() { s.w.cfg.OnShutdown(ok) })
	}
}

// waitPhases waits for runPhases to return (cancelJob first to make it).
func (s *supervisor) waitPhases() {
	if s.phases != nil {
		<-s.phases
		s.phases = nil
	}
}

// end handles the master's word that the job is over: a job that succeeded
// (and this worker completed) is committed; otherwise the phases are
// cancelled, the worker moves to Failed with the master's reason (unless it
// had Completed, which is terminal) and the shutdown's shuffle step waits
// for the phases. The master has ended the job: no last report goes out.
func (s *supervisor) end(rep *dsortpb.HeartbeatReply) error {
	ok := rep.GetJobSucceeded() && s.w.sm.Is(Completed)
	s.w.track.logger.Info("Received shutdown signal from Master", "succeeded", ok, "reason", rep.GetReason())
	if ok {
		// Committed before the shutdown (and its watchdog) starts: an S3
		// output's commit completes an upload per partition, which may take
		// longer than the exit's bound.
		s.waitPhases() // returned already: Completed is its last step
		s.sd.succeeded = true
		err := s.w.out.commit(s.asg.jobID, s.asg.index, s.w.out.inputs.withSample(s.w.inputs))
		s.shuttingDown(ok)
		s.cancelJob()
		s.sd.heartbeat = s.stopHB
		s.sd.phases = s.waitPhases
		return err
	}
	s.shuttingDown(ok)
	s.cancelJob()
	abort := &AbortError{Reason: rep.GetReason()}
	if !ok && !s.w.sm.State().IsTerminal() {
		s.w.sm.Transition(Failed, abort.Error())
	}
	s.sd.heartbeat = s.stopHB
	s.sd.phases = s.waitPhases
	return abort
}

// fail moves the worker to Failed; the shutdown's heartbeat step tells the
// master why, once.
func (s *supervisor) fail(cause error) error {
	s.w.track.logger.Error("worker failed", "state", s.w.sm.State(), "err", cause)
	s.shuttingDown(false)
	s.cancelJob()
	if !s.w.sm.Is(Failed, Completed) {
		s.w.sm.Transition(Failed, cause.Error())
	}
	s.sd.heartbeat = func() {
		s.stopHB()
		s.w.report(context.Background(), s.asg, shutdownBounds["heartbeat"]*3/4, cause.Error())
	}
	s.sd.phases = s.waitPhases
	return cause
}

// cleanupFiles removes, when the job did not commit (err != nil) and did
// not succeed, its staged partitions (an aborted job leaves no
// complete-looking output; the previous output stays), then the worker's
// temp dir, releasing its lock.
func (w *Worker) cleanupFiles(err error, succeeded bool) {
	if job := w.assigned().jobID; err != nil && !succeeded && job != "" {
		w.out.discard(job)
	}
	if w.s3in != nil {
		w.s3in.closeStores()
	}
	if w.out.remote != nil {
		w.out.remote.bs.Close()
		if err != nil && succeeded {
			// The commit failed: its intent and the staged partitions stay
			// for the next process of this worker to finish it
			// (output.finishCommit).
			w.cfg.Logger.Error("the S3 output's commit did not finish; run the worker again with the same arguments to finish it", "err", err, "temp_dir", w.dir.path)
			w.dir.release()
			return
		}
	}
	w.dir.close()
}
