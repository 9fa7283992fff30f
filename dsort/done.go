package dsort

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/record"
)

// Seed 000 §8.1, "Worker already completed. Nothing to do.": the done
// marker a commit writes records what this worker's output was made from
// (inputPrint) and what it holds (each partition's size). A worker started
// again whose output still holds exactly that, for inputs that still match
// the print, has nothing to do once it finds no master to join
// (Worker.join): it exits 0 without touching anything. Anything else — an
// input added, removed, rewritten, touched or moved; a partition missing,
// added or resized; no print (an older marker) — is not "completed", and
// the worker runs as always.

// sampleKeys is how many keys, at evenly spaced records, the print digests.
const sampleKeys = 4096

// inputFile is one input file as the print records it: its absolute path
// and stat data (the change time and inode catch a rewrite that kept the
// size and the modification time).
type inputFile struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	MTime int64  `json:"mtime_ns"`
	CTime int64  `json:"ctime_ns,omitempty"`
	Inode uint64 `json:"inode,omitempty"`
	Dev   uint64 `json:"dev,omitempty"`
}

// inputPrint identifies a worker's inputs: every file, in input order, and
// a SHA-256 of sampleKeys keys read at evenly spaced records.
type inputPrint struct {
	Files  []inputFile `json:"files"`
	Sample string      `json:"sample_sha256"`
	// remote: the print of S3 inputs (s3Inputs.printOf), whose Sample digests
	// the listing and is never replaced by one of the staged copies.
	remote bool
}

// printInputs takes the stat part of inputs' print (as ScanInputs listed
// them): cheap, taken at every start. The sample is added by withSample
// only where it is needed (at commit, and on a re-run that finds a
// marker): 4096 reads at random offsets cost seconds on a disk that seeks.
func printInputs(inputs []extsort.Input) (*inputPrint, error) {
	p := &inputPrint{}
	for _, in := range inputs {
		abs, err := filepath.Abs(in.Path)
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(in.Path)
		if err != nil {
			return nil, err
		}
		f := inputFile{Path: abs, Size: fi.Size(), MTime: fi.ModTime().UnixNano()}
		f.CTime, f.Inode, f.Dev = statIDs(fi)
		p.Files = append(p.Files, f)
	}
	return p, nil
}

// withSample returns a copy of p (taken at start) with the digest of
// inputs' sampled keys now; nil if p is nil or the inputs cannot be read.
func (p *inputPrint) withSample(inputs []extsort.Input) *inputPrint {
	if p == nil || p.remote {
		return p
	}
	keys, _, err := sampleInputs(inputs, sampleKeys)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(keys)
	q := &inputPrint{Files: p.Files, Sample: hex.EncodeToString(sum[:])}
	return q
}

func (p *inputPrint) equal(q *inputPrint) bool {
	return p != nil && q != nil && p.Sample != "" && p.Sample == q.Sample && slices.Equal(p.Files, q.Files)
}

// hasMarker reports whether the output dir holds a done marker.
func (o output) hasMarker() bool {
	if o.remote != nil {
		ctx, cancel := s3ctx()
		defer cancel()
		_, ok, err := o.remote.bs.Stat(ctx, record.DoneMarker)
		return err == nil && ok
	}
	_, err := os.Stat(filepath.Join(o.dir, record.DoneMarker))
	return err == nil
}

// remoteCompletedJob is completedJob for an S3 output: its marker and its
// partition objects.
func (o output) remoteCompletedJob(fp *inputPrint) string {
	ctx, cancel := s3ctx()
	defer cancel()
	mk, err := o.remote.marker(ctx)
	if err != nil || !o.describes(mk, fp) || !o.remote.completed(ctx, mk) {
		return ""
	}
	return mk.Job
}

// describes reports whether the marker mk is of inputs printed as fp,
// sorted as this worker sorts, with a size for each partition.
func (o output) describes(mk doneMarker, fp *inputPrint) bool {
	return mk.Inputs.equal(fp) && mk.Format == o.format && len(mk.Bytes) == len(mk.Partitions)
}

// completedJob returns the job whose committed output dir holds the result
// of inputs printed as fp, sorted as this worker sorts: the marker's print
// equals fp, its format is the worker's, and the dir's
// partition.<n> files are exactly the marker's, with their sizes. It
// returns "" otherwise (no marker, an older one, any difference).
func (o output) completedJob(fp *inputPrint) string {
	if o.remote != nil {
		return o.remoteCompletedJob(fp)
	}
	data, err := os.ReadFile(filepath.Join(o.dir, record.DoneMarker))
	if err != nil {
		return ""
	}
	var mk doneMarker
	if json.Unmarshal(data, &mk) != nil || !o.describes(mk, fp) {
		return ""
	}
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return ""
	}
	found := 0
	for _, e := range ents {
		if isPartitionName(e.Name()) {
			found++
		}
	}
	if found != len(mk.Partitions) {
		return ""
	}
	for i, p := range mk.Partitions {
		fi, err := os.Stat(filepath.Join(o.dir, partitionName(p)))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != mk.Bytes[i] {
			return ""
		}
	}
	return mk.Job
}
