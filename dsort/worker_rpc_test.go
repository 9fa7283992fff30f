package dsort

import (
	"testing"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/record"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Seed 000 §6.1: SetPartitionBoundaries is refused unless the worker waits
// for it.
func TestSetPartitionBoundariesOnlyWhenWaiting(t *testing.T) {
	w, err := NewWorker(WorkerConfig{Master: "127.0.0.1:1", Inputs: []string{"in"}, Output: "out", Memory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if w.sm, err = NewStateMachine("", nil, nil); err != nil {
		t.Fatal(err)
	}
	w.track.sm = w.sm
	w.asg = assignment{numWorkers: 2, epoch: 1}
	r := &workerRPC{w: w}
	pc := &dsortpb.PartitionConfig{Epoch: 1, NumPartitions: 2, PartitionsPerWorker: 1,
		Boundaries: []*dsortpb.Boundary{{Key: make([]byte, record.KeySize), Worker: 1}}}
	if _, err := r.SetPartitionBoundaries(t.Context(), pc); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("in Initializing: err = %v, want FailedPrecondition", err)
	}
	for _, s := range []State{Sampling, WaitingForPartitionConfig} {
		if err := w.sm.Transition(s, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// GetStatus reports the seed's §7 band for the waiting state.
	st, err := r.GetStatus(t.Context(), &dsortpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != dsortpb.WorkerState_WAITING_FOR_PARTITION_CONFIG || st.GetCurrentPhase() != dsortpb.Phase_PHASE_SAMPLING ||
		st.GetProgressPercentage() != 15 || st.GetMessage() != "Waiting for partition config" {
		t.Fatalf("GetStatus = %v", st)
	}
	bad := &dsortpb.PartitionConfig{Epoch: 1, NumPartitions: 3, PartitionsPerWorker: 1}
	if _, err := r.SetPartitionBoundaries(t.Context(), bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("inconsistent config: err = %v, want InvalidArgument", err)
	}
	if _, err := r.SetPartitionBoundaries(t.Context(), pc); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-w.signals.config:
		if got.perWorker != 1 || got.workers != 2 {
			t.Fatal("a different config was delivered")
		}
		if d := cmp.Diff([]Boundary{{Key: make([]byte, record.KeySize), Worker: 1}}, got.bounds); d != "" {
			t.Fatal(d)
		}
	default:
		t.Fatal("config not delivered")
	}
}
