package dsort

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
)

// step is one pass of the control loop: detect failures, advance the job's
// phase, then deliver the signals the workers are waiting for.
func (m *Master) step(ctx context.Context, now time.Time) {
	m.mu.Lock()
	if m.phase.Ended() {
		m.mu.Unlock()
		return
	}
	if reason := m.failureLocked(now); reason != "" {
		m.abortLocked(reason)
		m.mu.Unlock()
		return
	}
	m.markLostLocked(now)
	m.advanceLocked()
	var sends []signalSend
	if !m.phase.Ended() {
		sends = m.signalsLocked(now)
	}
	m.mu.Unlock()
	for _, s := range sends {
		m.sends.Go(func() { m.deliver(ctx, s) })
	}
}

// failureLocked returns why the job must abort now, or "": a worker
// reported Failed, or stayed silent past RejoinTimeout.
func (m *Master) failureLocked(now time.Time) string {
	if m.phase == JobRegistering && now.Sub(m.start) > m.cfg.RegisterTimeout {
		var got []string
		for _, mb := range m.members {
			got = append(got, fmt.Sprintf("worker %d %s", mb.index, mb.addr))
		}
		missing := fmt.Sprintf("worker %d", len(m.members))
		if n := m.cfg.Workers - len(m.members); n > 1 {
			missing = fmt.Sprintf("workers %d to %d (%d)", len(m.members), m.cfg.Workers-1, n)
		}
		if len(got) > 10 {
			got = append(got[:10], fmt.Sprintf("and %d more", len(got)-10))
		}
		return fmt.Sprintf("only %d of %d workers registered within the register timeout %s; missing: %s (registered: %s)",
			len(m.members), m.cfg.Workers, m.cfg.RegisterTimeout, missing, cmp.Or(strings.Join(got, ", "), "none"))
	}
	for _, mb := range m.members {
		silent := now.Sub(mb.lastSeen)
		if mb.state == Failed {
			return fmt.Sprintf("worker %d (%s) failed: %s", mb.index, mb.addr, mb.errMsg)
		}
		if silent > m.cfg.RejoinTimeout {
			return fmt.Sprintf("worker %d (%s) has been silent for %s and did not come back (rejoin timeout %s)",
				mb.index, mb.addr, silent.Round(time.Second), m.cfg.RejoinTimeout)
		}
	}
	return ""
}

// markLostLocked flags the workers silent past LostAfter: they get no
// signals until they report again.
func (m *Master) markLostLocked(now time.Time) {
	for _, mb := range m.members {
		if now.Sub(mb.lastSeen) > m.cfg.LostAfter && !mb.lost {
			mb.lost = true
			m.metrics.workerLost()
			m.cfg.Logger.Warn("worker lost; waiting for it to come back", "worker", mb.index, "addr", mb.addr,
				"state", mb.state, "rejoin_timeout", m.cfg.RejoinTimeout)
		}
	}
}

// advanceLocked moves the job through every phase the workers' reports
// allow (nextPhase decides), doing each transition's work.
func (m *Master) advanceLocked() {
	for {
		next := nextPhase(m.phase, m.viewLocked())
		if next == m.phase {
			return
		}
		switch next {
		case JobSorting:
			m.computeBoundsLocked()
		case JobShuffling:
			m.cfg.Logger.Info("shuffle barrier open: every worker has sorted")
		case JobMerging:
			m.cfg.Logger.Info("merge barrier open: every worker has its partitions' data")
		case JobSucceeded:
			m.cfg.Logger.Info("every worker completed")
		}
		m.setPhaseLocked(next)
	}
}

// viewLocked summarises the members for nextPhase.
func (m *Master) viewLocked() jobView {
	v := jobView{registered: len(m.members), workers: m.cfg.Workers, allSampled: true, least: Completed}
	for _, mb := range m.members {
		v.allSampled = v.allSampled && mb.sampled
		if mb.state == Failed {
			v.least = Initializing // a failed worker holds every barrier
		} else {
			v.least = min(v.least, mb.state)
		}
	}
	return v
}

// signalsLocked lists the signals to send now (signalFor decides) and
// marks them in flight.
func (m *Master) signalsLocked(now time.Time) []signalSend {
	var out []signalSend
	for _, mb := range m.members {
		if mb.lost || mb.client == nil {
			continue
		}
		sig, ok := signalFor(m.phase, mb.state)
		if !ok || mb.sent[sig] != unsent {
			continue
		}
		s := signalSend{mb: mb, epoch: mb.epoch, client: mb.client, sig: sig}
		switch sig {
		case sigConfig:
			s.config = partitionConfigToPB(m.cfg.JobID, mb.epoch, m.partitionConfigLocked(mb))
		case sigShuffle:
			s.barrier = &dsortpb.Barrier{JobId: m.cfg.JobID, Epoch: mb.epoch, Peers: peersToPB(m.peersLocked(now))}
		case sigMerge:
			s.barrier = &dsortpb.Barrier{JobId: m.cfg.JobID, Epoch: mb.epoch}
		}
		mb.sent[sig] = inflight
		out = append(out, s)
	}
	return out
}

// signalSend is one signal on its way to one epoch of a worker.
type signalSend struct {
	mb      *member
	epoch   int64
	client  dsortpb.WorkerClient
	sig     signal
	config  *dsortpb.PartitionConfig // sigConfig
	barrier *dsortpb.Barrier         // sigShuffle, sigMerge
}

// deliver sends s and records the outcome: delivered, or unsent again so
// that a later step retries.
func (m *Master) deliver(ctx context.Context, s signalSend) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	switch s.sig {
	case sigConfig:
		_, err = s.client.SetPartitionBoundaries(ctx, s.config)
	case sigShuffle:
		_, err = s.client.StartShuffle(ctx, s.barrier)
	case sigMerge:
		_, err = s.client.StartMerge(ctx, s.barrier)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.mb.epoch != s.epoch {
		return // the worker restarted meanwhile; its new epoch starts unsent
	}
	if err != nil {
		s.mb.sent[s.sig] = unsent
		m.cfg.Logger.Debug("signal not delivered; will retry", "worker", s.mb.index, "signal", s.sig, "err", err)
		return
	}
	s.mb.sent[s.sig] = delivered
}

func (m *Master) computeBoundsLocked() {
	keys := make([][][]byte, len(m.members))
	recs := make([]int64, len(m.members))
	cores := 1
	var total int64
	for i, mb := range m.members {
		keys[i], _ = splitSample(m.cfg.Lines != nil, mb.sample) // checked as it came in
		recs[i] = mb.records
		cores = max(cores, mb.cores)
		total += mb.inputBytes
	}
	n := int64(m.cfg.Workers)
	ppw := int(min(MaxPartitionsPerWorker, max(1, MaxPartitions/n), max(int64(cores), ceilDiv(total, n, m.cfg.PartitionSize))))
	m.ppw = ppw
	m.bounds = computeBoundaries(keys, recs, ppw*m.cfg.Workers, m.cfg.Lines != nil)
	m.cfg.Logger.Info("partition boundaries computed", "partitions", ppw*m.cfg.Workers,
		"per_worker", ppw, "input_bytes", total)
}

// ceilDiv is ⌈total/(n·size)⌉ for positive n and size, without overflow.
func ceilDiv(total, n, size int64) int64 {
	q := total / n
	if total%n != 0 {
		q++
	}
	return q/size + min(q%size, 1)
}

// partitionConfigLocked is the partition config for worker to: the
// boundaries and the number of the job's workers on its machine.
func (m *Master) partitionConfigLocked(to *member) partitionConfig {
	pc := partitionConfig{bounds: m.bounds, perWorker: m.ppw, workers: m.cfg.Workers}
	for _, mb := range m.members {
		if mb.machine == to.machine {
			pc.onMachine++
		}
	}
	return pc
}

func (m *Master) peersLocked(now time.Time) []peer {
	out := make([]peer, len(m.members))
	for i, mb := range m.members {
		out[i] = peer{index: i, addr: mb.addr, epoch: mb.epoch, state: mb.state, alive: now.Sub(mb.lastSeen) < m.cfg.LostAfter}
	}
	return out
}
