package dsort

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/clock"
)

// The worker's phases, in the seed's normal flow, each a method with its
// inputs and outputs in its signature:
//
//	samplePhase   inputs            → sample at the master        Sampling
//	sortPhase     partition config  → sortedJob (layout, plan,    Sorting
//	              + inputs            runs cut at the boundaries)
//	shufflePhase  peers + sortedJob → received pieces, merges      Shuffling
//	                                  started early (earlyMerges)
//	mergePhase    sortedJob + early → staged partitions           Merging
//
// Between them the worker waits for the master's signal (signals), which
// carries the next phase's input. runPhases chains them; the piece server
// serves from the sort's output as soon as it exists.

// phaseTracker is the phase runPhases is in and its progress, for the
// heartbeats, GetStatus and the phase metrics.
type phaseTracker struct {
	sm      *StateMachine
	clock   clock.Clock
	metrics *metrics
	logger  *slog.Logger // the seed's "Phase n/4" lines

	// phase and since are the phase in progress and when it began; only
	// runPhases's goroutine touches them.
	phase State
	since time.Time

	// done out of total (bytes or pieces) of the phase in progress: any
	// goroutine adds to done, the heartbeats read both.
	done, total atomic.Int64
}

// start moves the state machine to `to`, closing the previous phase's
// metric and resetting the progress to 0 of total. It logs seed 003's
// progress lines: "Phase n/4: <phase>..." as a phase begins, "✓ <phase>
// complete" as it ends and "✓ All phases complete!" at Completed.
func (t *phaseTracker) start(to State, reason string, total int64) error {
	now := t.clock.Now()
	if slices.Contains(phaseStates, t.phase) {
		t.metrics.phaseDone(t.phase, now.Sub(t.since))
		t.logger.Info(fmt.Sprintf("✓ %s complete", t.phase), "elapsed", now.Sub(t.since).Round(time.Millisecond))
	}
	t.phase, t.since = to, now
	t.done.Store(0)
	t.total.Store(total)
	if err := t.sm.Transition(to, reason); err != nil {
		return err
	}
	if i := slices.Index(phaseStates, to); i >= 0 {
		t.logger.Info(fmt.Sprintf("Phase %d/%d: %s...", i+1, len(phaseStates), to))
	} else if to == Completed {
		t.logger.Info("✓ All phases complete!")
	}
	return nil
}

func (t *phaseTracker) frac() float64 {
	total := t.total.Load()
	if total <= 0 {
		return 0
	}
	return float64(t.done.Load()) / float64(total)
}

func (t *phaseTracker) progress(st State) float64 { return Progress(st, t.frac()) }

// message is the seed's §7 status message.
func (t *phaseTracker) message(st State) string {
	pct := fmt.Sprintf("%.0f%%", 100*t.frac())
	switch st {
	case Initializing:
		return "Initializing worker"
	case Sampling:
		return "Extracting samples"
	case WaitingForPartitionConfig:
		return "Waiting for partition config"
	case Sorting:
		return "Sorting: " + pct
	case WaitingForShuffleSignal:
		return "Sorting complete, waiting for shuffle signal"
	case Shuffling:
		return "Shuffling: " + pct
	case WaitingForMergeSignal:
		return "Shuffle complete, waiting for merge signal"
	case Merging:
		return "Merging: " + pct
	case Completed:
		return "All phases completed"
	}
	return "Worker failed"
}

// phaseTimes is the state machine's measured phases.
func (t *phaseTracker) phaseTimes() []PhaseTime {
	var out []PhaseTime
	for _, p := range t.sm.Phases() {
		out = append(out, PhaseTime{State: p.Phase, Duration: p.Duration(), Done: p.Done})
	}
	return out
}

func waitFor[T any](ctx context.Context, ch <-chan T) (T, error) {
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// runPhases walks the seed's normal flow from Initializing to Completed.
// However it ends, no merge started during the shuffle outlives it.
func (w *Worker) runPhases(ctx context.Context, asg assignment, needSample bool) error {
	if err := w.samplePhase(ctx, asg, needSample); err != nil {
		return err
	}
	job, err := w.sortPhase(ctx, asg)
	if err != nil {
		return err
	}
	early, err := w.shufflePhase(ctx, asg, job)
	if early != nil {
		defer early.stop()
	}
	if err != nil {
		return err
	}
	if err := w.mergePhase(ctx, job, early); err != nil {
		return err
	}
	return w.track.start(Completed, "all phases completed successfully", 0)
}

// samplePhase: Sampling, then WaitingForPartitionConfig.
func (w *Worker) samplePhase(ctx context.Context, asg assignment, needSample bool) error {
	reason := "registered; sampling"
	if !needSample {
		reason = "registered again; the master already holds this worker's sample"
	}
	if err := w.track.start(Sampling, reason, 0); err != nil {
		return err
	}
	if needSample {
		if err := w.sample(ctx, asg); err != nil {
			return err
		}
	}
	return w.track.start(WaitingForPartitionConfig, "sampling complete, waiting for config", 0)
}

// sample reads the sample and submits it to the master (a few quick tries).
func (w *Worker) sample(ctx context.Context, asg assignment) error {
	keys, records, err := w.format.sample(w.inputs, w.cfg.SampleSize)
	if err != nil {
		return err
	}
	w.fault(ctx, "Sampling")
	req := &dsortpb.SampleRequest{JobId: asg.jobID, Index: int32(asg.index), Epoch: asg.epoch, Keys: keys, Records: records}
	var last error
	err = sampleRetry.Retry(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, last = asg.master.SubmitSample(cctx, req); last != nil && !retryable(last) {
			return backoff.Permanent(last)
		}
		return last
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("dsort: submit sample: %s", statusMessage(last))
}

// sortedJob is the sort phase's output, the shuffle's and merge's input.
type sortedJob struct {
	layout jobLayout
	plan   memoryPlan
	sorted *sortedInput
	merger *merger
}

// sortPhase takes in the partition config, then Sorting (sorter, cutRuns),
// then WaitingForShuffleSignal. From then on the piece server serves the
// sorted runs.
func (w *Worker) sortPhase(ctx context.Context, asg assignment) (*sortedJob, error) {
	pc, err := waitFor(ctx, w.signals.config)
	if err != nil {
		return nil, err
	}
	layout := jobLayout{self: asg.index, workers: asg.numWorkers, ppw: pc.perWorker, bounds: pc.bounds}
	w.shareCores(pc.onMachine)
	plan := w.planMemory(pc.onMachine, pc.perWorker)
	if err := w.track.start(Sorting, fmt.Sprintf("config received: %d partitions, %d per worker",
		pc.perWorker*pc.workers, pc.perWorker), w.inputBytes); err != nil {
		return nil, err
	}
	s := &sorter{format: w.format, inputs: w.inputs, plan: plan, tempDir: w.dir.path, runDir: w.dir.runs(), logger: w.cfg.Logger,
		progress: func(n int64) { w.track.done.Add(n); w.metrics.read(n) }}
	runs, kept, err := s.sort(ctx)
	if err != nil {
		return nil, err
	}
	w.metrics.sorted(w.inputBytes)
	w.fault(ctx, "Sorting")
	sorted, err := cutRuns(w.format, runs, kept, layout)
	if err != nil {
		if kept != nil {
			kept.Free() // nothing serves it yet
		}
		return nil, err
	}
	w.pieces.ready(&pieceSource{format: w.format, sorted: sorted, layout: layout, epoch: asg.epoch, memory: plan.serve}, w.cores)
	job := &sortedJob{layout: layout, plan: plan, sorted: sorted,
		merger: &merger{format: w.format, layout: layout, own: sorted, dir: w.dir, out: w.out, job: asg.jobID, memory: plan.merge, mapPieces: plan.keep}}
	if r := w.out.remote; r != nil { // each partition goes up as soon as it is merged
		sem := make(chan struct{}, s3Parallel)
		job.merger.staged = func(p int) { r.staged(ctx, sem, p) }
	}
	return job, w.track.start(WaitingForShuffleSignal, "sorting complete, waiting for signal", 0)
}

// shufflePhase: Shuffling once signalled, then WaitingForMergeSignal.
func (w *Worker) shufflePhase(ctx context.Context, asg assignment, job *sortedJob) (*earlyMerges, error) {
	peers, err := waitFor(ctx, w.signals.shuffle)
	if err != nil {
		return nil, err
	}
	pieces := int64(job.layout.partitions())
	if err := w.track.start(Shuffling, "signal received, starting shuffle", pieces); err != nil {
		return nil, err
	}
	f := newFetcher(asg, w.format, peers, w.creds, w.dir, w.cfg.Logger, w.metrics)
	defer f.close()
	early, err := w.shuffle(ctx, f, job.merger)
	if err != nil {
		return early, err
	}
	return early, w.track.start(WaitingForMergeSignal, "shuffle complete, waiting for signal", 0)
}

// mergePhase: Merging once signalled; it waits for the early merges and
// merges the partitions they did not.
func (w *Worker) mergePhase(ctx context.Context, job *sortedJob, early *earlyMerges) error {
	if _, err := waitFor(ctx, w.signals.merge); err != nil {
		return err
	}
	recvBytes, err := job.merger.receivedBytes()
	if err != nil {
		return err
	}
	if err := w.track.start(Merging, "signal received, starting merge", recvBytes+job.merger.ownBytes()); err != nil {
		return err
	}
	merged, err := early.wait()
	if err != nil {
		return err
	}
	w.track.done.Add(early.bytes.Load())
	if err := w.merge(ctx, job.merger, merged); err != nil {
		return err
	}
	return w.upload(ctx)
}

// upload waits until every staged partition is up, pending, in an S3
// output before the worker reports Completed (s3out.go): the commit then
// only completes the uploads. Most went up as they were merged.
func (w *Worker) upload(ctx context.Context) error {
	if w.out.remote == nil {
		return nil
	}
	start := time.Now()
	job := w.assigned().jobID
	sent, err := w.out.remote.finish(ctx, w.out.staged(job), func() { w.fault(ctx, "upload-partition") })
	if err == nil {
		err = ctx.Err() // interrupted at the fault point: not Completed
	}
	if err != nil {
		return err
	}
	w.cfg.Logger.Info("partitions uploaded", "output", w.out.remote.url, "bytes", sent, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
