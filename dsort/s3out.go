package dsort

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/internal/par"
	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/workspace/provider/s3"
)

// S3 output. An -O s3://bucket/prefix?endpoint=… is this worker's output
// "directory" in a bucket, as a local -O is: give each worker its own
// prefix. The merge writes the partitions into <workDir>/s3out as it does
// into a local output dir; each one, as soon as it is merged, goes up as
// the parts of a multipart upload of partition.<p> that is left pending —
// nothing is visible until it is completed — and the commit completes them
// (no data is copied):
//
//	merge   → <workDir>/s3out/.gantry-dsort-<job>.partition.<p>   (local, hidden)
//	upload  → pending multipart upload of <prefix>/partition.<p>, recorded in
//	          <workDir>/s3out/.uploads-<job>.json (all up before Completed)
//	commit  → old marker deleted; each upload completed (the object appears
//	          whole); old partitions not in the new set deleted; marker last
//	abort   → the uploads aborted; the previous output stays as it was
//
// So no reader ever sees part of a partition, a prefix whose marker is
// there holds exactly the partitions the marker names, and a job that
// fails leaves the previous output whole. A restarted process of the
// worker in the same job reuses the uploads its predecessor recorded and
// aborts any other pending upload of a partition it puts up (a killed
// one's). Uploads of an abandoned prefix stay pending until the bucket's
// lifecycle rule (AbortIncompleteMultipartUpload) drops them.

// s3Output is the remote side of an output.
type s3Output struct {
	url string
	bs  *s3.BlobStore
	dir string // the local staging dir: the journal lives there

	mu      sync.Mutex
	job     string
	pending map[int]s3.PendingUpload // the job's uploads, by partition (the journal)
	running sync.WaitGroup           // uploads started as partitions were merged
	failed  error                    // the first of them that failed
	sent    atomic.Int64
}

// s3Parallel is how many partitions go up (or are completed) at once.
const s3Parallel = 4

func (r *s3Output) journal(job string) string { return filepath.Join(r.dir, ".uploads-"+job+".json") }

// load reads job's journal (none: no uploads).
func (r *s3Output) load(job string) {
	pending := r.readJournal(job)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.job, r.pending = job, pending
}

// readJournal returns the uploads job's journal records (none if it has
// no journal).
func (r *s3Output) readJournal(job string) map[int]s3.PendingUpload {
	pending := map[int]s3.PendingUpload{}
	if data, err := os.ReadFile(r.journal(job)); err == nil {
		json.Unmarshal(data, &pending)
	}
	return pending
}

// record adds partition p's upload to the journal.
func (r *s3Output) record(p int, u s3.PendingUpload) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending[p] = u
	data, _ := json.Marshal(r.pending)
	if err := fsutil.WriteFileAtomic(r.journal(r.job), data, 0o644); err != nil {
		return fmt.Errorf("dsort: upload journal: %w", err)
	}
	return nil
}

// prepare aborts the uploads of earlier jobs' journals and makes job's
// journal the worker's.
func (r *s3Output) prepare(ctx context.Context, job string) {
	olds, _ := filepath.Glob(filepath.Join(r.dir, ".uploads-*.json"))
	for _, j := range olds {
		if j == r.journal(job) {
			continue
		}
		old := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(j), ".uploads-"), ".json")
		if r.discard(ctx, old) == nil { // an earlier job's uploads: never to be completed
			os.Remove(j)
		}
	}
	r.load(job)
}

// abortOrphans aborts the pending uploads of key other than keep: a killed
// process's, an earlier job's.
func (r *s3Output) abortOrphans(ctx context.Context, key, keep string) error {
	ids, err := r.bs.PendingUploadsOf(ctx, key)
	if err != nil {
		return fmt.Errorf("dsort: upload: %w", err)
	}
	for _, id := range ids {
		if id != keep {
			if err := r.bs.AbortUpload(ctx, key, id); err != nil {
				return fmt.Errorf("dsort: upload: %w", err)
			}
		}
	}
	return nil
}

// uploadOne puts partition p's staged file up as a pending upload, unless
// the journal has it up already.
func (r *s3Output) uploadOne(ctx context.Context, p int) error {
	path := filepath.Join(r.dir, stagedPrefix(r.job)+partitionName(p))
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("dsort: upload: %w", err)
	}
	r.mu.Lock()
	u, ok := r.pending[p]
	r.mu.Unlock()
	if ok && u.Size == fi.Size() {
		return nil
	}
	if err := r.abortOrphans(ctx, partitionName(p), ""); err != nil {
		return err
	}
	if u, err = r.bs.StartUpload(ctx, partitionName(p), path); err != nil {
		return fmt.Errorf("dsort: upload: %w", err)
	}
	r.sent.Add(fi.Size())
	return r.record(p, u)
}

// staged starts partition p's upload in the background (s3Parallel at a
// time): the merge calls it as each partition is written.
func (r *s3Output) staged(ctx context.Context, sem chan struct{}, p int) {
	r.running.Go(func() {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-sem }()
		if err := r.uploadOne(ctx, p); err != nil {
			r.mu.Lock()
			if r.failed == nil {
				r.failed = err
			}
			r.mu.Unlock()
		}
	})
}

// finish waits for the uploads started as partitions were merged and puts
// up the staged partitions still missing (a predecessor's, a failed one);
// after the first it calls fault ("upload-partition"). It returns the
// bytes sent.
func (r *s3Output) finish(ctx context.Context, staged map[int]bool, fault func()) (int64, error) {
	r.running.Wait()
	r.mu.Lock()
	failed := r.failed
	r.mu.Unlock()
	if failed != nil && ctx.Err() == nil {
		return r.sent.Load(), failed
	}
	parts := slices.Sorted(maps.Keys(staged))
	err := par.Do(ctx, len(parts), s3Parallel, func(ctx context.Context, i int) error {
		return r.uploadOne(ctx, parts[i])
	})
	if err == nil && len(parts) > 0 {
		fault()
	}
	return r.sent.Load(), err
}

// commit completes the uploads as the output mk describes. Run again after
// a crash, it finishes what the crash left: a partition whose upload is
// gone goes up again, whole, from the local copy in localDir; the marker
// is written only once every partition is in place.
func (r *s3Output) commit(ctx context.Context, mk doneMarker, localDir string) error {
	if prev, err := r.marker(ctx); err == nil && prev.Job == mk.Job && slices.Equal(prev.Partitions, mk.Partitions) {
		os.Remove(r.journal(mk.Job))
		return nil // committed
	}
	if r.job != mk.Job {
		r.load(mk.Job) // a predecessor's uploads (alreadySucceeded)
	}
	if err := r.bs.Delete(ctx, record.DoneMarker); err != nil {
		return fmt.Errorf("dsort: commit output: %w", err)
	}
	err := par.Do(ctx, len(mk.Partitions), s3Parallel, func(ctx context.Context, i int) error {
		p := mk.Partitions[i]
		r.mu.Lock()
		u, ok := r.pending[p]
		r.mu.Unlock()
		if ok && u.Size == mk.Bytes[i] {
			err := r.bs.CompleteUpload(ctx, u)
			if !errors.Is(err, s3.ErrUploadGone) {
				return err
			}
		} else if ok { // of another size: not this partition's
			if err := r.bs.AbortUpload(ctx, u.Key, u.UploadID); err != nil {
				return err
			}
		}
		// Gone (completed by a predecessor's commit, or aborted) or never
		// recorded: up again, whole, from the local copy.
		return r.bs.PutFile(ctx, partitionName(p), filepath.Join(localDir, stagedPrefix(mk.Job)+partitionName(p)))
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
	os.Remove(r.journal(mk.Job))
	return nil
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

// discard aborts job's uploads (s3Parallel at once, on past a failure):
// the previous output stays as it was. The journal goes only when every
// abort succeeded.
func (r *s3Output) discard(ctx context.Context, job string) error {
	r.running.Wait()
	pending := r.readJournal(job)
	if r.job == job {
		r.mu.Lock()
		maps.Copy(pending, r.pending)
		r.mu.Unlock()
	}
	ups := slices.Collect(maps.Values(pending))
	var failed atomic.Pointer[error]
	par.Do(ctx, len(ups), s3Parallel, func(ctx context.Context, i int) error {
		if err := r.bs.AbortUpload(ctx, ups[i].Key, ups[i].UploadID); err != nil {
			failed.CompareAndSwap(nil, &err)
		}
		return nil
	})
	if e := failed.Load(); e != nil {
		return *e
	}
	os.Remove(r.journal(job))
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
