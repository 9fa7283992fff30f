package dsort

import (
	"fmt"
	"time"
)

// JobPhase is the master's view of the whole job. It only moves forward:
//
//	Registering ──N registered──▶ Sampling ──every sample in──▶ Sorting
//	  ──every worker sorted──▶ Shuffling ──every worker shuffled──▶ Merging
//	  ──every worker completed──▶ Succeeded
//
//	any phase before Succeeded ──failure, silence, interrupt──▶ Aborted
//
// Sorting starts when the boundaries are computed: partition configs go
// out. Shuffling and Merging are the open shuffle and merge barriers.
type JobPhase int

// The job phases, in order.
const (
	JobRegistering JobPhase = iota
	JobSampling
	JobSorting
	JobShuffling
	JobMerging
	JobSucceeded
	JobAborted
)

var jobPhaseNames = [...]string{"registering", "sampling", "sorting", "shuffling", "merging", "succeeded", "aborted"}

func (p JobPhase) String() string {
	if p >= 0 && int(p) < len(jobPhaseNames) {
		return jobPhaseNames[p]
	}
	return fmt.Sprintf("JobPhase(%d)", int(p))
}

// ParseJobPhase is the inverse of String.
func ParseJobPhase(name string) (JobPhase, error) {
	for i, n := range jobPhaseNames {
		if n == name {
			return JobPhase(i), nil
		}
	}
	return 0, fmt.Errorf("dsort: unknown job phase %q", name)
}

// Ended reports whether the job is over (Succeeded or Aborted).
func (p JobPhase) Ended() bool { return p == JobSucceeded || p == JobAborted }

// jobView is what nextPhase needs to know about the workers.
type jobView struct {
	registered, workers int
	allSampled          bool
	// least is the earliest state of any worker (Initializing when one has
	// failed: a failed worker holds every barrier).
	least State
}

// nextPhase is the phase the job moves to from p given v; p itself when it
// stays. It is pure: the master applies the result (advanceLocked).
func nextPhase(p JobPhase, v jobView) JobPhase {
	full := v.registered == v.workers
	switch {
	case p == JobRegistering && full:
		return JobSampling
	case p == JobSampling && v.allSampled:
		return JobSorting
	case p == JobSorting && v.least >= WaitingForShuffleSignal:
		return JobShuffling
	case p == JobShuffling && v.least >= WaitingForMergeSignal:
		return JobMerging
	case p == JobMerging && v.least >= Completed:
		return JobSucceeded
	}
	return p
}

// signalFor returns the signal a worker in state s needs while the job is
// in phase p, if any. It is pure: the master sends it (signalsLocked).
func signalFor(p JobPhase, s State) (signal, bool) {
	switch {
	case p >= JobSorting && s == WaitingForPartitionConfig:
		return sigConfig, true
	case p >= JobShuffling && s == WaitingForShuffleSignal:
		return sigShuffle, true
	case p >= JobMerging && s == WaitingForMergeSignal:
		return sigMerge, true
	}
	return 0, false
}

// JobInfo is the master's view of the job (GetJobStatus, JobStatus).
type JobInfo struct {
	JobID       string
	Phase       JobPhase
	Workers     int // N
	Registered  int
	Elapsed     time.Duration
	AbortReason string
	Members     []WorkerInfo
}
