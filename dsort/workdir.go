package dsort

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/lifecycle"
)

// workDirPrefix starts the name of every worker's temp dir under TempDir.
const workDirPrefix = "gantry-dsort-"

// workDir is a worker's own temp dir, cfg.TempDir/gantry-dsort-<id>, where
// <id> hashes the worker's -I and -O: the state file, runs/ (spilled runs)
// and recv/ (committed shuffle pieces, and recv/.job naming the job and
// inputs they belong to). The process holds its lock from prepare to close.
//
// A process that finds the pieces a predecessor received keeps them until it
// knows its job (adopt): a worker killed mid-job and restarted with its temp
// dir rejoins the same job, whose pieces are the same whichever process of
// a sender sent them (the job's boundaries are fixed and every sort is
// deterministic), so it fetches only the pieces still missing.
type workDir struct {
	path  string
	owned *fsutil.OwnedDir // the lock on path; nil until prepare
}

func newWorkDir(tempDir string, inputs []string, output string) *workDir {
	sum := sha256.Sum256([]byte(strings.Join(inputs, "\x00") + "\x00\x00" + output))
	return &workDir{path: filepath.Join(tempDir, workDirPrefix+hex.EncodeToString(sum[:6]))}
}

func (d *workDir) runs() string { return filepath.Join(d.path, "runs") }

// s3in holds the staged S3 inputs and s3out the partitions of an S3
// output until they go up; a restarted process keeps both (s3in.go, s3out.go).
func (d *workDir) s3in() string  { return filepath.Join(d.path, "s3in") }
func (d *workDir) s3out() string { return filepath.Join(d.path, "s3out") }
func (d *workDir) recv() string  { return filepath.Join(d.path, "recv") }

// piecePath is where the committed piece of partition p from sender s lives.
func (d *workDir) piecePath(p, s int) string {
	return filepath.Join(d.recv(), "p"+strconv.Itoa(p)+".s"+strconv.Itoa(s))
}

// keepDeadWorkDir is how long the temp dir of a worker that died stays
// for its restart (another worker's start sweeps it after): two workers of
// one machine killed together each find their pieces when restarted.
const keepDeadWorkDir = time.Hour

// prepare takes ownership of the dir (a second process with the same
// arguments stops here, having touched nothing shared), sweeps the temp
// dirs of workers dead for keepDeadWorkDir under tempDir and clears what a
// crashed predecessor left in its own (but the pieces it received: adopt).
func (d *workDir) prepare(tempDir string, logger *slog.Logger) error {
	owned, err := fsutil.LockDir(d.path)
	if errors.Is(err, fsutil.ErrBusy) {
		return fmt.Errorf("dsort: another process of this worker (same -I and -O) is running and owns %s; "+
			"this one stops without touching anything: %w", d.path, err)
	}
	if err != nil {
		return fmt.Errorf("dsort: temp dir: %w", err)
	}
	d.owned = owned
	if swept, err := fsutil.SweepStaleIdle(tempDir, workDirPrefix, keepDeadWorkDir); err != nil {
		logger.Warn("sweeping stale temp dirs", "dir", tempDir, "err", err)
	} else if len(swept) > 0 {
		logger.Info("removed temp dirs of workers that are gone", "dirs", swept)
	}
	if snap, err := lifecycle.LoadSnapshot(filepath.Join(d.path, StateFileName)); err == nil {
		logPrevious(logger, snap)
	}
	return d.clear(true)
}

// recvJob is recv/.job: the job, format and inputs the pieces in recv/
// belong to, and the boot they were written in: a piece is renamed into
// place without an fsync, which a process's death does not undo but the
// machine's may.
type recvJob struct {
	Job    string      `json:"job"`
	Format string      `json:"format,omitempty"`
	Inputs []inputFile `json:"inputs"`
	Boot   string      `json:"boot,omitempty"`
}

// bootID names this boot of the machine (Linux); "" elsewhere, where
// pieces are then kept across restarts of the machine too.
func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

const recvJobFile = ".job"

// adopt keeps the pieces in recv/ if they belong to job, sorted as format
// says, to inputs as they are now and to this boot (a restart of this
// worker in the same job), else removes them; then recv/ is job's. It
// reports whether it kept them.
func (d *workDir) adopt(job, format string, inputs *inputPrint) (bool, error) {
	mine := recvJob{Job: job, Format: format, Boot: bootID()}
	if inputs != nil {
		mine.Inputs = inputs.Files
	}
	path := filepath.Join(d.recv(), recvJobFile)
	var prev recvJob
	if data, err := os.ReadFile(path); err == nil && json.Unmarshal(data, &prev) == nil &&
		prev.Job == mine.Job && prev.Format == mine.Format && prev.Boot == mine.Boot && slices.Equal(prev.Inputs, mine.Inputs) {
		return true, nil
	}
	if err := os.RemoveAll(d.recv()); err != nil {
		return false, fmt.Errorf("dsort: clean temp dir: %w", err)
	}
	if err := os.MkdirAll(d.recv(), 0o755); err != nil {
		return false, fmt.Errorf("dsort: %w", err)
	}
	data, _ := json.Marshal(mine)
	if err := fsutil.WriteFileAtomic(path, data, 0o644); err != nil {
		return false, fmt.Errorf("dsort: %w", err)
	}
	return false, nil
}

// hasPiece reports whether the piece of partition p from sender s is
// committed.
func (d *workDir) hasPiece(p, s int) bool {
	_, err := os.Stat(d.piecePath(p, s))
	return err == nil
}

// logPrevious says where the previous process of this worker stopped, from
// the state file it left (seed 000 §8.1): Failed (it died before its
// shutdown removed the file) or a state it never left (it was killed).
// Either way the caller cleans up and starts again; Completed is proven by
// the output's done marker instead (done.go), since a success removes the
// temp dir.
func logPrevious(logger *slog.Logger, snap lifecycle.Snapshot) {
	at := snap.Updated.Format(time.RFC3339)
	if snap.State == Failed.String() {
		reason := ""
		if n := len(snap.History); n > 0 {
			reason = snap.History[n-1].Reason
		}
		logger.Warn("Worker previously failed. Cleaning up and restarting...", "previous_state", snap.State,
			"reason", reason, "at", at)
		return
	}
	logger.Warn("a previous run of this worker stopped here; cleaning up and starting again (the pieces it received are kept if it rejoins the same job)",
		"previous_state", snap.State, "at", at)
}

// clear removes everything in the dir but its lock and, with keepRecv, the
// committed pieces in recv/ (for adopt; pieces being received are
// removed), then creates runs/ and recv/.
func (d *workDir) clear(keepRecv bool) error {
	ents, err := os.ReadDir(d.path)
	if err != nil {
		return fmt.Errorf("dsort: temp dir: %w", err)
	}
	for _, e := range ents {
		switch e.Name() {
		case filepath.Base(d.s3in()), filepath.Base(d.s3out()):
			continue // checked by their users: the manifest, output.prepare
		}
		if e.Name() == fsutil.OwnerFile || keepRecv && e.Name() == filepath.Base(d.recv()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(d.path, e.Name())); err != nil {
			return fmt.Errorf("dsort: clean temp dir: %w", err)
		}
	}
	if keepRecv {
		parts, _ := filepath.Glob(filepath.Join(d.recv(), "*.part"))
		for _, p := range parts {
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("dsort: clean temp dir: %w", err)
			}
		}
	}
	for _, dir := range []string{d.runs(), d.recv()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("dsort: %w", err)
		}
	}
	return nil
}

// receivedBytes is the size of the pieces received so far.
func (d *workDir) receivedBytes() (int64, error) {
	ents, err := os.ReadDir(d.recv())
	if err != nil {
		return 0, fmt.Errorf("dsort: %w", err)
	}
	var n int64
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue // recv/.job
		}
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n, nil
}

// release releases the dir's lock and keeps what is in it, for the next
// process of this worker.
func (d *workDir) release() {
	if d.owned != nil {
		d.owned.Release()
	}
}

// close removes the dir and releases its lock (a no-op before prepare).
func (d *workDir) close() {
	if d.owned != nil {
		d.owned.Close()
	}
}
