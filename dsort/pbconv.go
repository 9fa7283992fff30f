package dsort

import (
	"bytes"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/record"
)

// Every conversion between dsort's types and the protobuf messages of
// dsortpb lives in this file, so that the wire format is read and written in
// one place.

// stateToPB and stateFromPB convert worker states; the enums share
// numbering.
func stateToPB(s State) dsortpb.WorkerState   { return dsortpb.WorkerState(s) }
func stateFromPB(s dsortpb.WorkerState) State { return State(s) }

// phaseOf maps a state to the coarse phase of seed 000 §7: waiting states
// count as the phase they wait after.
func phaseOf(s State) dsortpb.Phase {
	switch s {
	case Initializing:
		return dsortpb.Phase_PHASE_INITIALIZING
	case Sampling, WaitingForPartitionConfig:
		return dsortpb.Phase_PHASE_SAMPLING
	case Sorting, WaitingForShuffleSignal:
		return dsortpb.Phase_PHASE_SORTING
	case Shuffling, WaitingForMergeSignal:
		return dsortpb.Phase_PHASE_SHUFFLING
	case Merging:
		return dsortpb.Phase_PHASE_MERGING
	case Completed:
		return dsortpb.Phase_PHASE_COMPLETED
	}
	return dsortpb.Phase_PHASE_FAILED
}

func phasesToPB(ps []PhaseTime) []*dsortpb.PhaseTime {
	out := make([]*dsortpb.PhaseTime, 0, len(ps))
	for _, p := range ps {
		out = append(out, &dsortpb.PhaseTime{State: stateToPB(p.State), DurationMs: p.Duration.Milliseconds(), Done: p.Done})
	}
	return out
}

func phasesFromPB(ps []*dsortpb.PhaseTime) []PhaseTime {
	var out []PhaseTime
	for _, p := range ps {
		out = append(out, PhaseTime{State: stateFromPB(p.GetState()),
			Duration: time.Duration(p.GetDurationMs()) * time.Millisecond, Done: p.GetDone()})
	}
	return out
}

func workerStatusPB(w WorkerInfo) *dsortpb.WorkerStatus {
	return &dsortpb.WorkerStatus{Index: int32(w.Index), Epoch: w.Epoch, State: stateToPB(w.State),
		CurrentPhase: phaseOf(w.State), ProgressPercentage: w.Progress, Message: w.Message,
		Address: w.Address, Alive: w.Alive, LastSeenMs: w.LastSeen.Milliseconds(), Phases: phasesToPB(w.Phases)}
}

// WorkerInfoFromPB converts a status message (from GetJobStatus) back.
func WorkerInfoFromPB(ws *dsortpb.WorkerStatus) WorkerInfo {
	return WorkerInfo{Index: int(ws.GetIndex()), Address: ws.GetAddress(), Epoch: ws.GetEpoch(),
		State: stateFromPB(ws.GetState()), Progress: ws.GetProgressPercentage(), Message: ws.GetMessage(),
		Alive: ws.GetAlive(), LastSeen: time.Duration(ws.GetLastSeenMs()) * time.Millisecond,
		Phases: phasesFromPB(ws.GetPhases())}
}

func jobInfoToPB(j JobInfo) *dsortpb.JobStatus {
	js := &dsortpb.JobStatus{JobId: j.JobID, Phase: j.Phase.String(), NumWorkers: int32(j.Workers),
		Registered: int32(j.Registered), ElapsedMs: j.Elapsed.Milliseconds(), AbortReason: j.AbortReason}
	for _, w := range j.Members {
		js.Workers = append(js.Workers, workerStatusPB(w))
	}
	return js
}

func jobInfoFromPB(js *dsortpb.JobStatus) JobInfo {
	phase, _ := ParseJobPhase(js.GetPhase())
	j := JobInfo{JobID: js.GetJobId(), Phase: phase, Workers: int(js.GetNumWorkers()),
		Registered: int(js.GetRegistered()), Elapsed: time.Duration(js.GetElapsedMs()) * time.Millisecond,
		AbortReason: js.GetAbortReason()}
	for _, w := range js.GetWorkers() {
		j.Members = append(j.Members, WorkerInfoFromPB(w))
	}
	return j
}

func boundariesToPB(bs []Boundary) []*dsortpb.Boundary {
	out := make([]*dsortpb.Boundary, 0, len(bs))
	for _, b := range bs {
		out = append(out, &dsortpb.Boundary{Key: b.Key, Worker: int32(b.Worker), Count: b.Count})
	}
	return out
}

func peersToPB(ps []peer) []*dsortpb.Peer {
	out := make([]*dsortpb.Peer, len(ps))
	for i, p := range ps {
		out[i] = &dsortpb.Peer{Index: int32(p.index), Address: p.addr, Epoch: p.epoch, State: stateToPB(p.state), Alive: p.alive}
	}
	return out
}

func peersFromPB(ps []*dsortpb.Peer) []peer {
	out := make([]peer, len(ps))
	for i, p := range ps {
		out[i] = peer{index: int(p.GetIndex()), addr: p.GetAddress(), epoch: p.GetEpoch(), state: stateFromPB(p.GetState()), alive: p.GetAlive()}
	}
	return out
}

// partitionConfigToPB is the config the master sends a worker.
func partitionConfigToPB(jobID string, epoch int64, pc partitionConfig) *dsortpb.PartitionConfig {
	return &dsortpb.PartitionConfig{JobId: jobID, Epoch: epoch, NumPartitions: int32(pc.perWorker * pc.workers),
		PartitionsPerWorker: int32(pc.perWorker), WorkersOnMachine: int32(pc.onMachine), Boundaries: boundariesToPB(pc.bounds)}
}

// partitionConfigFromPB checks a received config against a job of
// numWorkers workers sorting f and converts it; errors are ErrBadRequest.
func partitionConfigFromPB(pc *dsortpb.PartitionConfig, numWorkers int, f recordFormat) (partitionConfig, error) {
	n, ppw := int(pc.GetNumPartitions()), int(pc.GetPartitionsPerWorker())
	if ppw < 1 || n != ppw*numWorkers || len(pc.GetBoundaries()) != n-1 {
		return partitionConfig{}, errorf(ErrBadRequest, "dsort: inconsistent partition config: %d partitions, %d per worker, %d boundaries",
			n, ppw, len(pc.GetBoundaries()))
	}
	bounds := make([]Boundary, n-1)
	for i, b := range pc.GetBoundaries() {
		if !f.lines() && len(b.GetKey()) != record.KeySize {
			return partitionConfig{}, errorf(ErrBadRequest, "dsort: boundary %d has a %d-byte key", i, len(b.GetKey()))
		}
		bounds[i].Key = bytes.Clone(b.GetKey())
		bounds[i].Worker, bounds[i].Count = int(b.GetWorker()), b.GetCount()
		if i > 0 && compareBoundaries(bounds[i-1], bounds[i]) > 0 {
			return partitionConfig{}, errorf(ErrBadRequest, "dsort: boundaries %d and %d are out of order", i-1, i)
		}
	}
	return partitionConfig{bounds: bounds, perWorker: ppw, workers: numWorkers, onMachine: int(pc.GetWorkersOnMachine())}, nil
}
