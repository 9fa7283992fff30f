package dsort

import (
	"context"
	"sync"

	"github.com/gantryhq/gantry/dsort/dsortpb"
)

// workerRPC is the gRPC face of a Worker: it converts messages (pbconv.go),
// calls the worker's logic and maps its errors to status codes (statusOf).
type workerRPC struct {
	dsortpb.UnimplementedWorkerServer
	w *Worker
}

func (r *workerRPC) SetPartitionBoundaries(ctx context.Context, pc *dsortpb.PartitionConfig) (*dsortpb.Ack, error) {
	if err := r.w.acceptConfig(pc); err != nil {
		return nil, statusOf(err)
	}
	return &dsortpb.Ack{}, nil
}

func (r *workerRPC) StartShuffle(ctx context.Context, b *dsortpb.Barrier) (*dsortpb.Ack, error) {
	if err := r.w.signal(WaitingForShuffleSignal, "shuffle", func() {
		select {
		case r.w.signals.shuffle <- peersFromPB(b.GetPeers()):
		default:
		}
	}); err != nil {
		return nil, statusOf(err)
	}
	return &dsortpb.Ack{}, nil
}

func (r *workerRPC) StartMerge(ctx context.Context, b *dsortpb.Barrier) (*dsortpb.Ack, error) {
	if err := r.w.signal(WaitingForMergeSignal, "merge", func() {
		select {
		case r.w.signals.merge <- struct{}{}:
		default:
		}
	}); err != nil {
		return nil, statusOf(err)
	}
	return &dsortpb.Ack{}, nil
}

func (r *workerRPC) GetStatus(ctx context.Context, req *dsortpb.StatusRequest) (*dsortpb.WorkerStatus, error) {
	return workerStatusPB(r.w.info()), nil
}

// ShuffleData streams this worker's records of one partition: its runs'
// slices for that partition merged into one sorted stream.
func (r *workerRPC) ShuffleData(req *dsortpb.ShuffleRequest, stream dsortpb.Worker_ShuffleDataServer) error {
	return statusOf(r.w.pieces.serve(stream.Context(), int(req.GetReceiver()), int(req.GetPartition()), stream.Send))
}

// signals carries the master's signals from the RPC handlers to
// runPhases. Each carries everything its phase needs: it is the only path
// by which the signal's data reaches the worker's logic.
type signals struct {
	config  chan partitionConfig // buffered(1), from SetPartitionBoundaries
	shuffle chan []peer          // buffered(1), from StartShuffle
	merge   chan struct{}        // buffered(1), from StartMerge

	mu         sync.Mutex // protects configured
	configured bool       // a config was delivered: later ones are retries
}

func newSignals() *signals {
	return &signals{config: make(chan partitionConfig, 1), shuffle: make(chan []peer, 1), merge: make(chan struct{}, 1)}
}

// deliverConfig passes on the first config; retried deliveries are dropped.
func (s *signals) deliverConfig(pc partitionConfig) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.configured {
		s.configured = true
		s.config <- pc
	}
}

// acceptConfig takes the master's partition config. Seed 000 §6.1: only a
// worker waiting for its config may take one. A retried delivery is
// acknowledged and ignored.
func (w *Worker) acceptConfig(msg *dsortpb.PartitionConfig) error {
	if err := w.sm.Require(WaitingForPartitionConfig); err != nil {
		return errorf(ErrWrongState, "dsort: cannot set partition config: %v", err)
	}
	asg := w.assigned()
	if msg.GetEpoch() != asg.epoch {
		return errorf(ErrStaleEpoch, "dsort: config for epoch %d, this worker is epoch %d", msg.GetEpoch(), asg.epoch)
	}
	pc, err := partitionConfigFromPB(msg, asg.numWorkers, w.format)
	if err != nil {
		return err
	}
	w.signals.deliverConfig(pc)
	return nil
}

// signal takes the master's shuffle or merge signal, which a worker waiting
// for it (in state waiting) acts on by deliver; a retried delivery, once
// the worker has moved past waiting, is acknowledged and ignored.
func (w *Worker) signal(waiting State, what string, deliver func()) error {
	if w.sm.State() > waiting && !w.sm.Is(Failed) {
		return nil // a retried delivery
	}
	if err := w.sm.Require(waiting); err != nil {
		return errorf(ErrWrongState, "dsort: cannot start %s: %v", what, err)
	}
	deliver()
	return nil
}

// info is the worker's own view of itself (GetStatus).
func (w *Worker) info() WorkerInfo {
	st := w.sm.State()
	asg := w.assigned()
	return WorkerInfo{Index: asg.index, Epoch: asg.epoch, State: st, Progress: w.track.progress(st),
		Message: w.track.message(st), Alive: true, Phases: w.track.phaseTimes()}
}
