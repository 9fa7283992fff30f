package dsort

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/lifecycle"
	"github.com/gantryhq/gantry/record"
)

// Output safety (issue 9). A worker's output directory is touched only
// after the master accepted the worker into a live job, and existing
// partition.<n> files are replaced only at commit:
//
//	merge   → .gantry-dsort-<job>.partition.<p>   (staged, complete, hidden)
//	commit  → old marker removed, old partitions not in the new set removed,
//	          staged files renamed to partition.<p>, marker written
//	abort   → staged files removed; the previous output stays as it was
//
// The marker (record.DoneMarker) names the job that wrote the partitions.

// workDirPrefix starts the name of every worker's temp dir under TempDir.
const workDirPrefix = "gantry-dsort-"

// stagedPrefix starts the names of job's staged partitions.
func stagedPrefix(job string) string { return ".gantry-dsort-" + job + "." }

// stagedName is where merge writes partition p until the job commits.
func (w *Worker) stagedName(p int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return stagedPrefix(w.jobID) + partitionName(p)
}

// doneMarker is the content of the output's completion marker.
type doneMarker struct {
	Job        string    `json:"job"`
	Worker     int       `json:"worker"`
	Partitions []int     `json:"partitions"`
	Committed  time.Time `json:"committed"`
}

// prepare reads the inputs' sizes, takes ownership of the worker's temp
// dir (a second process with the same arguments stops here, having touched
// nothing shared), sweeps the temp dirs of dead workers and clears what a
// crashed predecessor left in its own. It never touches the output.
func (w *Worker) prepare() error {
	inputs, total, err := extsort.ScanInputs(w.cfg.Inputs)
	if err != nil {
		return err
	}
	w.inputs, w.inputBytes = inputs, total
	owned, err := fsutil.LockDir(w.workDir)
	if errors.Is(err, fsutil.ErrBusy) {
		return fmt.Errorf("dsort: another process of this worker (same -I and -O) is running and owns %s; "+
			"this one stops without touching anything: %w", w.workDir, err)
	}
	if err != nil {
		return fmt.Errorf("dsort: temp dir: %w", err)
	}
	w.owned = owned
	if swept, err := fsutil.SweepStale(w.cfg.TempDir, workDirPrefix); err != nil {
		w.cfg.Logger.Warn("sweeping stale temp dirs", "dir", w.cfg.TempDir, "err", err)
	} else if len(swept) > 0 {
		w.cfg.Logger.Info("removed temp dirs of workers that are gone", "dirs", swept)
	}
	if snap, err := lifecycle.LoadSnapshot(filepath.Join(w.workDir, StateFileName)); err == nil {
		w.cfg.Logger.Warn("a previous run of this worker stopped here; cleaning up and starting again",
			"previous_state", snap.State, "at", snap.Updated.Format(time.RFC3339))
	}
	ents, err := os.ReadDir(w.workDir)
	if err != nil {
		return fmt.Errorf("dsort: temp dir: %w", err)
	}
	for _, e := range ents {
		if e.Name() != fsutil.OwnerFile {
			if err := os.RemoveAll(filepath.Join(w.workDir, e.Name())); err != nil {
				return fmt.Errorf("dsort: clean temp dir: %w", err)
			}
		}
	}
	for _, d := range []string{w.runDir(), w.recvDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("dsort: %w", err)
		}
	}
	return nil
}

// prepareOutput creates the output dir and removes staged files of earlier
// attempts (never partition.<n> files: those stay until commit).
func (w *Worker) prepareOutput() error {
	if err := os.MkdirAll(w.cfg.Output, 0o755); err != nil {
		return fmt.Errorf("dsort: output dir: %w", err)
	}
	return removeStaged(w.cfg.Output, ".gantry-dsort-")
}

// removeStaged removes the files in dir whose names start with prefix and
// end in a partition name, and interrupted atomic writes of them.
func removeStaged(dir, prefix string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("dsort: output dir: %w", err)
	}
	for _, e := range ents {
		name := strings.TrimPrefix(e.Name(), fsutil.TempPrefix)
		if strings.HasPrefix(name, prefix) && strings.Contains(name, "."+record.PartitionPrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("dsort: clean output dir: %w", err)
			}
		}
	}
	return nil
}

// commitOutput makes the job's staged partitions the output: it runs once
// the master has declared the job succeeded. Interrupted, it is finished by
// the next process of this worker (alreadySucceeded).
func (w *Worker) commitOutput() error {
	w.mu.Lock()
	job, index := w.jobID, w.index
	w.mu.Unlock()
	dir := w.cfg.Output
	staged, old, err := scanOutput(dir, job)
	if err != nil {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
	if len(staged) == 0 {
		return nil // committed already
	}
	if err := os.Remove(filepath.Join(dir, record.DoneMarker)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
	mk := doneMarker{Job: job, Worker: index, Committed: time.Now().UTC()}
	for p := range staged {
		mk.Partitions = append(mk.Partitions, p)
	}
	slices.Sort(mk.Partitions)
	for _, name := range old {
		if n, _ := record.PartitionNumber(name); staged[int(n)] == "" {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("dsort: commit output: %w", err)
			}
		}
	}
	for _, p := range mk.Partitions {
		if err := os.Rename(filepath.Join(dir, staged[p]), filepath.Join(dir, partitionName(p))); err != nil {
			return fmt.Errorf("dsort: commit output: %w", err)
		}
	}
	data, _ := json.MarshalIndent(mk, "", "  ")
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, record.DoneMarker), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
	w.cfg.Logger.Info("output committed", "dir", dir, "job", job, "partitions", len(mk.Partitions))
	return nil
}

// scanOutput returns job's staged partitions in dir (by number) and the
// partition.<n> files already there.
func scanOutput(dir, job string) (staged map[int]string, old []string, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	staged = map[int]string{}
	for _, e := range ents {
		if rest, ok := strings.CutPrefix(e.Name(), stagedPrefix(job)); ok {
			if p, ok := record.PartitionNumber(rest); ok {
				staged[int(p)] = e.Name()
			}
		} else if isPartitionName(e.Name()) {
			old = append(old, e.Name())
		}
	}
	return staged, old, nil
}

// alreadySucceeded handles the master's answer that this worker's job has
// already succeeded: the partitions are final. It finishes a commit a
// crashed predecessor had not completed, and otherwise leaves them alone.
func (w *Worker) alreadySucceeded(err error) error {
	w.cfg.Logger.Info("the job already succeeded; leaving the output as it is", "reason", err)
	w.mu.Lock()
	w.jobID = jobOf(err.Error())
	w.mu.Unlock()
	if w.jobID == "" {
		return nil
	}
	return w.commitOutput()
}

// jobOf extracts the job ID from the master's "job <id> succeeded" answer.
func jobOf(msg string) string {
	_, rest, ok := strings.Cut(msg, "job ")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, " ")
	return id
}

// cleanup runs on every exit that can run code: it removes the staged
// partitions of a job that did not commit (an aborted job leaves no
// complete-looking output; the previous output stays) and the worker's own
// temp dir, frees the input it kept sorted in memory, then releases its
// lock.
func (w *Worker) cleanup(errp *error) {
	w.mu.Lock()
	job := w.jobID
	w.mu.Unlock()
	if *errp != nil && job != "" {
		removeStaged(w.cfg.Output, stagedPrefix(job))
	}
	w.mu.Lock()
	kept := w.kept
	w.kept = nil
	w.mu.Unlock()
	if kept != nil {
		kept.Free() // the server is stopped (Run's defers): nothing reads it
	}
	if w.owned != nil {
		w.owned.Close()
	}
}
