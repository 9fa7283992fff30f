package dsort

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/internal/fsutil"
)

// masterSnapshot is the job state a master persists (MasterConfig.StateFile)
// at each transition, so that a master restarted with the same file and
// port re-adopts the running workers: they keep their runs and shuffle data
// and reconnect on their own.
type masterSnapshot struct {
	JobID       string           `json:"job_id"`
	Workers     int              `json:"workers"`
	Format      string           `json:"format,omitempty"` // formatSpec of the job's records
	Phase       JobPhase         `json:"phase"`
	PhaseName   string           `json:"phase_name"` // for people reading the file
	Bounds      []Boundary       `json:"bounds,omitempty"`
	PPW         int              `json:"ppw,omitempty"`
	AbortReason string           `json:"abort_reason,omitempty"`
	Members     []memberSnapshot `json:"members"`
	Saved       time.Time        `json:"saved"`
}

// memberSnapshot is one worker slot of a masterSnapshot.
type memberSnapshot struct {
	Index      int     `json:"index"`
	Identity   string  `json:"identity"`
	Addr       string  `json:"addr"`
	Host       string  `json:"host"`
	Machine    string  `json:"machine"`
	Output     string  `json:"output,omitempty"`
	Cores      int     `json:"cores"`
	InputBytes int64   `json:"input_bytes"`
	Epoch      int64   `json:"epoch"`
	State      State   `json:"state"`
	Progress   float64 `json:"progress"`
	Sample     []byte  `json:"sample,omitempty"`
	Records    int64   `json:"records"`
	Sampled    bool    `json:"sampled"`
}

// persistLocked writes the job state to StateFile (atomically), if set. A
// failed write is logged: the job goes on, only a restart would lose it.
func (m *Master) persistLocked() {
	if m.cfg.StateFile == "" {
		return
	}
	s := masterSnapshot{JobID: m.cfg.JobID, Workers: m.cfg.Workers, Format: formatSpec(m.cfg.Lines), Phase: m.phase, PhaseName: m.phase.String(),
		Bounds: m.bounds, PPW: m.ppw, AbortReason: m.abortReason, Saved: m.clock.Now().UTC()}
	for _, mb := range m.members {
		s.Members = append(s.Members, memberSnapshot{Index: mb.index, Identity: mb.identity, Addr: mb.addr,
			Host: mb.host, Machine: mb.machine, Output: mb.output, Cores: mb.cores, InputBytes: mb.inputBytes, Epoch: mb.epoch,
			State: mb.state, Progress: mb.progress, Sample: mb.sample, Records: mb.records, Sampled: mb.sampled})
	}
	data, err := json.Marshal(s)
	if err == nil {
		err = fsutil.WriteFileAtomic(m.cfg.StateFile, data, 0o600)
	}
	if err != nil {
		m.cfg.Logger.Error("cannot save the job state; a restarted master could not resume", "file", m.cfg.StateFile, "err", err)
	}
}

// restore loads StateFile, if set and present, and re-adopts its job: the
// same job ID, members (dialled again at their addresses), boundaries and
// phase. Workers are taken as just seen, so the rejoin timeout counts from
// now.
func (m *Master) restore() error {
	if m.cfg.StateFile == "" {
		return nil
	}
	data, err := os.ReadFile(m.cfg.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: state file: %w", ErrConfig, err)
	}
	var s masterSnapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%w: state file %s: %w", ErrConfig, m.cfg.StateFile, err)
	}
	if s.Workers != m.cfg.Workers || s.JobID == "" || len(s.Members) > s.Workers {
		return fmt.Errorf("%w: state file %s is for a job of %d workers (job %q), not %d", ErrConfig,
			m.cfg.StateFile, s.Workers, s.JobID, m.cfg.Workers)
	}
	if job := formatSpec(m.cfg.Lines); s.Format != job {
		return fmt.Errorf("%w: state file %s is for a job that sorts %s, not %s: give the master the options it had",
			ErrConfig, m.cfg.StateFile, describeFormat(s.Format), describeFormat(job))
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cfg.JobID, m.phase, m.bounds, m.ppw, m.abortReason = s.JobID, s.Phase, s.Bounds, s.PPW, s.AbortReason
	for _, ms := range s.Members {
		mb := &member{index: ms.Index, identity: ms.Identity, addr: ms.Addr, host: ms.Host, machine: ms.Machine, output: ms.Output,
			cores: ms.Cores, inputBytes: ms.InputBytes, epoch: ms.Epoch, state: ms.State, progress: ms.Progress,
			sample: ms.Sample, records: ms.Records, sampled: ms.Sampled, lastSeen: now, message: "re-adopted"}
		if mb.conn, err = dialMetered(mb.addr, m.creds, m.metrics); err != nil {
			return fmt.Errorf("dsort: re-adopt worker %d: %w", mb.index, err)
		}
		mb.client = dsortpb.NewWorkerClient(mb.conn)
		m.members = append(m.members, mb)
	}
	m.announced = len(m.members) == m.cfg.Workers
	if m.phase.Ended() {
		close(m.ended)
	}
	m.cfg.Logger.Info("resuming the job from its state file", "file", m.cfg.StateFile, "job", s.JobID,
		"phase", s.Phase, "workers", len(s.Members), "saved", s.Saved.Format(time.RFC3339))
	return nil
}

// announceResumed gives a master that resumed a full job the same second
// stdout line a fresh one prints: the workers' IPs in worker order.
func (m *Master) announceResumed() {
	m.mu.Lock()
	var ips []string
	if m.cfg.StateFile != "" && m.announced {
		for _, mb := range m.members {
			ips = append(ips, mb.host)
		}
	}
	m.mu.Unlock()
	if ips != nil && m.cfg.OnRegistered != nil {
		m.cfg.OnRegistered(ips)
	}
}
