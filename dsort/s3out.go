package dsort

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/par"
	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/s3"
)

// S3 output. An -O s3://bucket/prefix?endpoint=… is this worker's output
// "directory" in a bucket, as a local -O is: give each worker its own
// prefix. The merge writes the partitions into <workDir>/s3out as it does
// into a local output dir; then the partitions go up under the same staged
// names a local dir would hold them under, and the commit makes them the
// output with the local commit's steps:
//
//	merge   → <workDir>/s3out/.gantry-dsort-<job>.partition.<p>   (local, hidden)
//	upload  → <prefix>/.gantry-dsort-<job>.partition.<p>          (before Completed;
//	          multipart: visible only when whole)
//	commit  → old marker deleted; each staged object copied on the server to
//	          partition.<p> (an object appears only when whole); old partitions
//	          not in the new set deleted; marker written last; staged objects deleted
//	abort   → staged objects deleted; the previous output stays as it was
//
// So no reader ever sees part of a partition, a prefix whose marker is
// there holds exactly the partitions the marker names, and a job that
// fails leaves the previous output whole.

// s3Output is the remote side of an output.
type s3Output struct {
	url string
	bs  *s3.BlobStore
}

// s3Parallel is how many partitions go up (or are copied) at once.
const s3Parallel = 4

// upload puts job's staged partitions in dir up under their staged names,
// skipping those a predecessor of this worker already put up whole.
// After the first one, it calls fault (the fault point "upload-partition").
func (r *s3Output) upload(ctx context.Context, dir, job string, staged map[int]bool, fault func()) (int64, error) {
	parts := sortedKeys(staged)
	var sent atomic.Int64
	err := par.Do(ctx, len(parts), s3Parallel, func(ctx context.Context, i int) error {
		name := stagedPrefix(job) + partitionName(parts[i])
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("dsort: upload: %w", err)
		}
		if size, ok, err := r.bs.Stat(ctx, name); err == nil && ok && size == fi.Size() {
			return nil // up already: an object is visible only whole
		}
		if err := r.bs.PutFile(ctx, name, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("dsort: upload: %w", err)
		}
		if sent.Add(fi.Size()) == fi.Size() {
			fault()
		}
		return nil
	})
	return sent.Load(), err
}

// commit makes job's staged objects the output. bytes are the partitions'
// sizes. Run again after a crash, it finishes what the crash left: the
// marker is written only once every partition is in place.
func (r *s3Output) commit(ctx context.Context, mk doneMarker, localDir string) error {
	if prev, err := r.marker(ctx); err == nil && prev.Job == mk.Job && slices.Equal(prev.Partitions, mk.Partitions) {
		return r.removeStaged(ctx, stagedPrefix(mk.Job)) // committed: only the staged objects were left
	}
	if err := r.bs.Delete(ctx, record.DoneMarker); err != nil {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
	err := par.Do(ctx, len(mk.Partitions), s3Parallel, func(ctx context.Context, i int) error {
		p := mk.Partitions[i]
		staged := stagedPrefix(mk.Job) + partitionName(p)
		err := r.bs.Copy(ctx, staged, partitionName(p), mk.Bytes[i])
		if errors.Is(err, provider.ErrNotFound) { // never went up (a predecessor's commit): from the local copy
			err = r.bs.PutFile(ctx, partitionName(p), filepath.Join(localDir, staged))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
	if err := r.removeOld(ctx, mk.Partitions); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(mk, "", "  ")
	if err := r.bs.Put(ctx, record.DoneMarker, strings.NewReader(string(data)+"\n")); err != nil {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
	return r.removeStaged(ctx, stagedPrefix(mk.Job))
}

// removeOld deletes the partition objects that are not in keep.
func (r *s3Output) removeOld(ctx context.Context, keep []int) error {
	blobs, err := r.bs.List(ctx, "")
	if err != nil {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
	for _, b := range blobs {
		if n, ok := record.PartitionNumber(b.Key); ok && isPartitionName(b.Key) && !slices.Contains(keep, int(n)) {
			if err := r.bs.Delete(ctx, b.Key); err != nil {
				return fmt.Errorf("dsort: commit output: %w", err)
			}
		}
	}
	return nil
}

// removeStaged deletes the staged objects whose names start with prefix.
func (r *s3Output) removeStaged(ctx context.Context, prefix string) error {
	blobs, err := r.bs.List(ctx, "")
	if err != nil {
		return fmt.Errorf("dsort: clean output: %w", err)
	}
	for _, b := range blobs {
		if strings.HasPrefix(b.Key, prefix) && strings.Contains(b.Key, "."+record.PartitionPrefix) {
			if err := r.bs.Delete(ctx, b.Key); err != nil {
				return fmt.Errorf("dsort: clean output: %w", err)
			}
		}
	}
	return nil
}

// prepare deletes the staged objects of other jobs (earlier attempts).
func (r *s3Output) prepare(ctx context.Context, job string) error {
	blobs, err := r.bs.List(ctx, "")
	if err != nil {
		return fmt.Errorf("dsort: output: %w", err)
	}
	for _, b := range blobs {
		if strings.HasPrefix(b.Key, ".gantry-dsort-") && !strings.HasPrefix(b.Key, stagedPrefix(job)) &&
			strings.Contains(b.Key, "."+record.PartitionPrefix) {
			if err := r.bs.Delete(ctx, b.Key); err != nil {
				return fmt.Errorf("dsort: clean output: %w", err)
			}
		}
	}
	return nil
}

// marker reads the output's done marker.
func (r *s3Output) marker(ctx context.Context) (doneMarker, error) {
	var mk doneMarker
	rc, err := r.bs.Get(ctx, record.DoneMarker)
	if err != nil {
		return mk, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 1<<24))
	if err != nil {
		return mk, err
	}
	return mk, json.Unmarshal(data, &mk)
}

// completed reports whether the prefix holds exactly the partitions mk
// names, with their sizes.
func (r *s3Output) completed(ctx context.Context, mk doneMarker) bool {
	blobs, err := r.bs.List(ctx, "")
	if err != nil {
		return false
	}
	sizes := map[int]int64{}
	for _, b := range blobs {
		if n, ok := record.PartitionNumber(b.Key); ok && isPartitionName(b.Key) {
			sizes[int(n)] = b.Size
		}
	}
	if len(sizes) != len(mk.Partitions) {
		return false
	}
	for i, p := range mk.Partitions {
		if size, ok := sizes[p]; !ok || size != mk.Bytes[i] {
			return false
		}
	}
	return true
}

// s3Timeout bounds the S3 requests of a commit or a check at start.
const s3Timeout = 10 * time.Minute

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
