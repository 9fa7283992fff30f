package dsort

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/record"
)

// Output safety. A worker's output directory is touched only after the
// master accepted the worker into a live job, and existing partition.<n>
// files are replaced only at commit:
//
//	merge   → .gantry-dsort-<job>.partition.<p>   (staged, complete, hidden)
//	commit  → old marker removed, old partitions not in the new set removed,
//	          staged files renamed to partition.<p>, marker written
//	abort   → staged files removed; the previous output stays as it was
//
// The marker (record.DoneMarker) names the job that wrote the partitions.

// stagedPrefix starts the names of job's staged partitions.
func stagedPrefix(job string) string { return ".gantry-dsort-" + job + "." }

// doneMarker is the content of the output's completion marker.
type doneMarker struct {
	Job        string    `json:"job"`
	Worker     int       `json:"worker"`
	Partitions []int     `json:"partitions"`
	Bytes      []int64   `json:"bytes"` // each partition's size, as Partitions
	Committed  time.Time `json:"committed"`
	// Inputs is what the output was made from (done.go); nil when this
	// process cannot vouch for it (it finished a predecessor's commit):
	// then no re-run claims completion.
	Inputs *inputPrint `json:"inputs,omitempty"`
	// Format is what the job sorted (formatSpec: "" for gensort records):
	// a re-run with other options has something to do.
	Format string `json:"format,omitempty"`
}

// output is the worker's output directory: where merge stages the job's
// partitions and commit makes them partition.<n> files.
type output struct {
	dir    string
	logger *slog.Logger
	clock  clock.Clock // dates the marker
	inputs *inputPrint // what the worker's inputs were at its start
	format string      // formatSpec of what the worker sorts
	remote *s3Output   // -O s3://…: dir is the local staging dir (s3out.go)
}

// s3ctx bounds the S3 requests of an output step.
func s3ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s3Timeout)
}

// stagedPath is where merge writes job's partition p until the job commits.
func (o output) stagedPath(job string, p int) string {
	return filepath.Join(o.dir, stagedPrefix(job)+partitionName(p))
}

// prepare creates the output dir and removes staged files of earlier
// attempts (never partition.<n> files: those stay until commit), except,
// with keep, job's complete staged partitions: a predecessor in the same
// job merged them from the same pieces (workDir.adopt), and they need not
// be merged again (staged).
func (o output) prepare(job string, keep bool) error {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return fmt.Errorf("dsort: output dir: %w", err)
	}
	if o.remote != nil {
		ctx, cancel := s3ctx()
		defer cancel()
		o.remote.prepare(ctx, job)
	}
	if !keep {
		return removeStaged(o.dir, ".gantry-dsort-")
	}
	mine := o.staged(job)
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return fmt.Errorf("dsort: output dir: %w", err)
	}
	for _, e := range ents {
		name := strings.TrimPrefix(e.Name(), fsutil.TempPrefix)
		if n, ok := strings.CutPrefix(e.Name(), stagedPrefix(job)); ok && isPartitionName(n) {
			continue // complete: written atomically
		}
		if strings.HasPrefix(name, ".gantry-dsort-") && strings.Contains(name, "."+record.PartitionPrefix) {
			if err := os.Remove(filepath.Join(o.dir, e.Name())); err != nil {
				return fmt.Errorf("dsort: clean output dir: %w", err)
			}
		}
	}
	if len(mine) > 0 {
		o.logger.Info("kept the partitions the previous process of this worker merged in this job", "partitions", len(mine))
	}
	return nil
}

// staged returns the partitions of job staged in the output dir.
func (o output) staged(job string) map[int]bool {
	ents, _ := os.ReadDir(o.dir)
	out := map[int]bool{}
	for _, e := range ents {
		if n, ok := strings.CutPrefix(e.Name(), stagedPrefix(job)); ok && isPartitionName(n) {
			if p, ok := record.PartitionNumber(n); ok {
				out[int(p)] = true
			}
		}
	}
	return out
}

// discard removes job's staged partitions: a job that did not commit
// leaves no complete-looking output, and the previous output stays.
func (o output) discard(job string) {
	removeStaged(o.dir, stagedPrefix(job))
	if o.remote != nil {
		ctx, cancel := s3ctx()
		defer cancel()
		if err := o.remote.discard(ctx, job); err != nil {
			o.logger.Warn("aborting the failed job's uploads", "output", o.remote.url, "err", err)
		}
	}
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

// commit makes job's staged partitions the output: it runs once the master
// has declared the job succeeded. Interrupted, it is finished by the next
// process of this worker (alreadySucceeded).
func (o output) commit(job string, index int, inputs *inputPrint) error {
	dir := o.dir
	staged, old, err := scanOutput(dir, job)
	if o.remote != nil && os.IsNotExist(err) {
		return nil // nothing staged here: this process did not merge (committed by the one that did)
	}
	if err != nil {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
	if len(staged) == 0 {
		return nil // committed already
	}
	mk := doneMarker{Job: job, Worker: index, Committed: o.clock.Now().UTC(), Inputs: inputs, Format: o.format}
	if err := mk.describe(dir, staged); err != nil {
		return err
	}
	if o.remote != nil { // the local staged copies go with the temp dir
		return o.commitRemote(mk)
	}
	if err := os.Remove(filepath.Join(dir, record.DoneMarker)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
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
	o.logger.Info("output committed", "dir", dir, "job", job, "partitions", len(mk.Partitions))
	return nil
}

// commitRemote commits an S3 output as mk describes it. Its intent is
// written first: a process of this worker that finds it (finishCommit)
// finishes the commit, with or without a master.
func (o output) commitRemote(mk doneMarker) error {
	intent := filepath.Join(o.dir, commitIntent)
	data, _ := json.Marshal(mk)
	if err := fsutil.WriteFileAtomic(intent, data, 0o644); err != nil {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
	ctx, cancel := s3ctx()
	defer cancel()
	if err := o.remote.commit(ctx, mk, o.dir); err != nil {
		return err
	}
	os.Remove(intent)
	o.logger.Info("output committed", "output", o.remote.url, "job", mk.Job, "partitions", len(mk.Partitions))
	return nil
}

// commitIntent is the file, in an S3 output's staging dir, that holds the
// marker of a commit begun and not finished.
const commitIntent = ".commit.json"

// finishCommit finishes an S3 output's commit a previous process of this
// worker began and did not finish (killed, or an S3 error), before anything
// else: the job succeeded, and its master may be gone.
// It returns the job it committed ("" when there was none).
func (o output) finishCommit() (string, error) {
	if o.remote == nil {
		return "", nil
	}
	data, err := os.ReadFile(filepath.Join(o.dir, commitIntent))
	if err != nil {
		return "", nil
	}
	var mk doneMarker
	if err := json.Unmarshal(data, &mk); err != nil {
		return "", fmt.Errorf("dsort: %s: %w", commitIntent, err)
	}
	o.logger.Info("finishing the commit of the S3 output a previous process of this worker began", "job", mk.Job, "output", o.remote.url)
	return mk.Job, o.commitRemote(mk)
}

// describe fills in the partitions staged in dir (by number) and their sizes.
func (mk *doneMarker) describe(dir string, staged map[int]string) error {
	for p := range staged {
		mk.Partitions = append(mk.Partitions, p)
	}
	slices.Sort(mk.Partitions)
	for _, p := range mk.Partitions {
		fi, err := os.Stat(filepath.Join(dir, staged[p]))
		if err != nil {
			return fmt.Errorf("dsort: commit output: %w", err)
		}
		mk.Bytes = append(mk.Bytes, fi.Size())
	}
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
//
// Its marker carries no print of the inputs: the staged partitions were
// made by a predecessor, from inputs this process cannot vouch for, so no
// later re-run claims completion from it.
func (w *Worker) alreadySucceeded(err error) error {
	w.cfg.Logger.Info("the job already succeeded; leaving the output as it is", "reason", err)
	job := jobOf(err.Error())
	w.mu.Lock()
	w.asg.jobID = job
	w.mu.Unlock()
	if job == "" {
		return nil
	}
	return w.out.commit(job, w.assigned().index, nil)
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
