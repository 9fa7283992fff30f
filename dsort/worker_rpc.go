package dsort

import (
	"context"

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
		case r.w.shuffleCh <- peersFromPB(b.GetPeers()):
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
		case r.w.mergeCh <- struct{}{}:
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
	return statusOf(r.w.servePiece(stream.Context(), int(req.GetReceiver()), int(req.GetPartition()), stream.Send))
}

// acceptConfig takes the master's partition config. Seed 000 §6.1: only a
// worker waiting for its config may take one. A retried delivery is
// acknowledged and ignored.
func (w *Worker) acceptConfig(msg *dsortpb.PartitionConfig) error {
	if err := w.sm.Require(WaitingForPartitionConfig); err != nil {
		return errorf(ErrWrongState, "dsort: cannot set partition config: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if msg.GetEpoch() != w.epoch {
		return errorf(ErrStaleEpoch, "dsort: config for epoch %d, this worker is epoch %d", msg.GetEpoch(), w.epoch)
	}
	pc, err := partitionConfigFromPB(msg, w.numWorkers)
	if err != nil {
		return err
	}
	if w.configured {
		return nil // a retried delivery
	}
	w.configured = true
	w.cfgCh <- pc
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
	w.mu.Lock()
	info := WorkerInfo{Index: w.index, Epoch: w.epoch, State: st, Progress: w.progress(st), Message: w.message(st), Alive: true}
	w.mu.Unlock()
	info.Phases = w.phaseTimes()
	return info
}
