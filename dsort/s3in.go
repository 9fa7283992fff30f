package dsort

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/extsort"
	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/fsutil"
	"github.com/gantryhq/gantry/internal/par"
	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/s3"
)

// S3 inputs. An -I s3://bucket/prefix?endpoint=… stands for every object
// under the prefix, in key order, as a directory stands for its files (but
// hidden names: record.HiddenObject). The
// objects are downloaded ("staged") into the worker's temp dir before it
// samples, and the sort runs on the local copies exactly as on local input:
//
//	<workDir>/s3in/<i>/<n>         piece n of the objects of the i-th -I
//	<workDir>/s3in/.manifest.json  what the pieces are; written last
//
// With Share K/N, the worker takes the K-th of N equal byte ranges of all
// its S3 objects taken as one sequence, its ends moved to a record boundary
// (gensort) or to the start of the next line (lines): N workers given the
// same -I and the shares 0/N … N-1/N read every record exactly once, and a
// large object is split between them.
//
// A process of the worker killed and restarted in the same boot finds the
// manifest and reuses the pieces when the listing still matches; anything
// else downloads again. The staged input goes with the temp dir when the
// job ends.

// Share is the part of its S3 inputs a worker sorts: the Index-th of Count
// equal byte ranges. The zero value is all of them.
type Share struct{ Index, Count int }

func (s Share) whole() bool { return s.Count <= 1 }

func (s Share) String() string {
	if s.whole() {
		return ""
	}
	return strconv.Itoa(s.Index) + "/" + strconv.Itoa(s.Count)
}

// ParseShare reads "K/N" (0 ≤ K < N).
func ParseShare(v string) (Share, error) {
	a, b, ok := strings.Cut(v, "/")
	k, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || k < 0 || k >= n {
		return Share{}, fmt.Errorf("%w: share %q: want K/N with 0 <= K < N, e.g. 0/4 for the first of 4 workers", ErrConfig, v)
	}
	return Share{Index: k, Count: n}, nil
}

func isS3(path string) bool { return strings.HasPrefix(path, "s3://") }

// openS3 opens the store an s3:// input or output names and proves it
// usable (endpoint, credentials, bucket) before anything else happens.
func openS3(ctx context.Context, raw string) (*s3.BlobStore, error) {
	cfg, err := s3.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if cfg.CreateBucket {
		return nil, fmt.Errorf("%w: %s: create= is not for the sort (make the bucket first)", ErrConfig, raw)
	}
	bs, err := s3.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := bs.Check(cctx); err != nil {
		bs.Close()
		return nil, fmt.Errorf("dsort: %s: %w", raw, err)
	}
	return bs, nil
}

// s3Object is one object of an S3 input and, in a manifest's pieces, the
// byte range [From, To) of it that a piece holds.
type s3Object struct {
	Input    int       `json:"input"` // index in -I
	Key      string    `json:"key"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
	ETag     string    `json:"etag,omitempty"`
	From     int64     `json:"from,omitempty"`
	To       int64     `json:"to,omitempty"`
}

// s3Manifest describes the staged input: the listing it was cut from and
// the pieces downloaded.
type s3Manifest struct {
	Inputs  []string   `json:"inputs"`
	Share   string     `json:"share,omitempty"`
	Format  string     `json:"format,omitempty"`
	Boot    string     `json:"boot,omitempty"`
	Objects []s3Object `json:"objects"`
	Pieces  []s3Object `json:"pieces"`
}

// s3Inputs stages the worker's S3 inputs.
type s3Inputs struct {
	dir    string // <workDir>/s3in
	args   []string
	share  Share
	format recordFormat
	stores map[int]*s3.BlobStore // by -I index
	logger *slog.Logger

	listing string      // digest of the objects listed (listObjects): the master checks workers sharing them saw the same
	print   *inputPrint // of the S3 inputs as listed (printOf); nil when -I also names local dirs
}

const manifestName = ".manifest.json"

// local returns the -I list with each S3 input replaced by its staging dir.
func (s *s3Inputs) local() []string {
	out := slices.Clone(s.args)
	for i := range s.stores {
		out[i] = filepath.Join(s.dir, strconv.Itoa(i))
	}
	return out
}

// listObjects lists the S3 inputs' objects (list) and keeps their digest
// (listing) and the print of the worker's S3 inputs (print).
func (s *s3Inputs) listObjects(ctx context.Context) ([]s3Object, error) {
	objs, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	data, _ := json.Marshal(objs) // with their ETags
	digest := sha256.Sum256(data)
	s.listing = hex.EncodeToString(digest[:8])
	s.print = s.printOf(objs, digest)
	return objs, nil
}

// printOf is the print (done.go) of the S3 inputs listed as objs, whose
// JSON's SHA-256 is listing: each object as its URL, size and modification
// time, and for the sample the digest of the listing (the objects' ETags
// with it), the -I list, the share and the format. It stands for the
// staged copies, which are new files at every download: with it a re-run
// whose objects have not changed finds its committed output before it
// downloads anything.
func (s *s3Inputs) printOf(objs []s3Object, listing [sha256.Size]byte) *inputPrint {
	p := &inputPrint{remote: true}
	for _, o := range objs {
		p.Files = append(p.Files, inputFile{Path: s.stores[o.Input].URL(o.Key), Size: o.Size, MTime: o.Modified.UnixNano()})
	}
	data, _ := json.Marshal(struct {
		Inputs  []string
		Share   string
		Format  string
		Listing []byte
	}{s.args, s.share.String(), s.format.spec, listing[:]})
	sum := sha256.Sum256(data)
	p.Sample = "s3:" + hex.EncodeToString(sum[:])
	return p
}

// stage makes the local copies of the worker's share and reports what it
// did: the bytes downloaded (0 when a predecessor's copies were reused).
func (s *s3Inputs) stage(ctx context.Context, objs []s3Object) (int64, error) {
	pieces, err := s.cut(ctx, objs)
	if err != nil {
		return 0, err
	}
	man := s3Manifest{Inputs: s.args, Share: s.share.String(), Format: s.format.spec, Boot: bootID(), Objects: objs, Pieces: pieces}
	if s.reusable(man) {
		return 0, nil
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return 0, fmt.Errorf("dsort: clean staged input: %w", err)
	}
	for i := range s.stores {
		if err := os.MkdirAll(filepath.Join(s.dir, strconv.Itoa(i)), 0o755); err != nil {
			return 0, fmt.Errorf("dsort: %w", err)
		}
	}
	n, err := s.download(ctx, pieces)
	if err != nil {
		return n, err
	}
	data, _ := json.MarshalIndent(man, "", " ")
	if err := fsutil.WriteFileAtomic(filepath.Join(s.dir, manifestName), data, 0o644); err != nil {
		return n, fmt.Errorf("dsort: %w", err)
	}
	return n, nil
}

// list lists every S3 input's objects, in -I order and key order within.
func (s *s3Inputs) list(ctx context.Context) ([]s3Object, error) {
	var out []s3Object
	for i := range s.args {
		bs := s.stores[i]
		if bs == nil {
			continue
		}
		blobs, err := bs.List(ctx, "")
		if err != nil {
			return nil, fmt.Errorf("dsort: list %s: %w", s.args[i], err)
		}
		slices.SortFunc(blobs, func(a, b provider.BlobInfo) int { return strings.Compare(a.Key, b.Key) })
		if !slices.ContainsFunc(blobs, func(b provider.BlobInfo) bool { return !record.HiddenObject(b.Key) }) {
			// As a missing input dir is refused: a typo must not commit an
			// empty output over the previous one.
			return nil, fmt.Errorf("%w: no objects under %s", extsort.ErrBadInput, bs.URL(""))
		}
		for _, b := range blobs {
			if record.HiddenObject(b.Key) {
				continue // a "folder" marker, a done marker, a sort's staged upload
			}
			if !s.format.lines() && b.Size%record.Size != 0 {
				return nil, fmt.Errorf("%w: %s is %d bytes, not a whole number of %d-byte records",
					extsort.ErrBadInput, bs.URL(b.Key), b.Size, record.Size)
			}
			out = append(out, s3Object{Input: i, Key: b.Key, Size: b.Size, Modified: b.Modified.UTC(), ETag: b.ETag})
		}
	}
	return out, nil
}

// cut returns the pieces of objs that make up the worker's share.
func (s *s3Inputs) cut(ctx context.Context, objs []s3Object) ([]s3Object, error) {
	starts := make([]int64, len(objs)+1)
	for i, o := range objs {
		starts[i+1] = starts[i] + o.Size
	}
	total := starts[len(objs)]
	lo, hi := int64(0), total
	if !s.share.whole() {
		var err error
		if lo, err = s.align(ctx, objs, starts, shareOffset(total, s.share.Index, s.share.Count)); err != nil {
			return nil, err
		}
		if hi, err = s.align(ctx, objs, starts, shareOffset(total, s.share.Index+1, s.share.Count)); err != nil {
			return nil, err
		}
	}
	var pieces []s3Object
	for i, o := range objs {
		from, to := max(lo, starts[i])-starts[i], min(hi, starts[i+1])-starts[i]
		if to > from || o.Size == 0 && lo <= starts[i] && starts[i] < hi {
			p := o
			p.From, p.To = from, to
			pieces = append(pieces, p)
		}
	}
	return pieces, nil
}

// shareOffset is ⌊total·k/n⌋ without overflow.
func shareOffset(total int64, k, n int) int64 {
	h, l := bits.Mul64(uint64(total), uint64(k))
	q, _ := bits.Div64(h, l, uint64(n))
	return int64(q)
}

// align moves the offset c of the sequence objs (object i starts at
// starts[i]) to where a record begins at or after it: the next multiple
// of the record size within its object, or the start of the next line.
// Both workers that share a boundary compute the same one.
func (s *s3Inputs) align(ctx context.Context, objs []s3Object, starts []int64, c int64) (int64, error) {
	i, _ := slices.BinarySearch(starts, c)
	if starts[i] == c {
		return c, nil // an object starts here
	}
	i-- // c is inside object i
	off := c - starts[i]
	if !s.format.lines() {
		return starts[i] + (off+record.Size-1)/record.Size*record.Size, nil
	}
	nl, err := s.nextNewline(ctx, objs[i], off-1)
	if err != nil {
		return 0, err
	}
	return starts[i] + nl + 1, nil
}

// nextNewline returns the offset of the first '\n' at or after off in o,
// or o.Size-1 when there is none (the last line ends with the object).
func (s *s3Inputs) nextNewline(ctx context.Context, o s3Object, off int64) (int64, error) {
	bs := s.stores[o.Input]
	const step = 64 << 10
	for off < o.Size {
		rc, err := bs.GetRangeOf(ctx, o.Key, o.ETag, off, min(step, o.Size-off))
		if err != nil {
			return 0, fmt.Errorf("dsort: read %s: %w", bs.URL(o.Key), err)
		}
		buf, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return 0, fmt.Errorf("dsort: read %s: %w", bs.URL(o.Key), err)
		}
		if len(buf) == 0 {
			return 0, fmt.Errorf("dsort: read %s: it is shorter than listed (%d bytes); did it change?", bs.URL(o.Key), o.Size)
		}
		if j := bytes.IndexByte(buf, '\n'); j >= 0 {
			return off + int64(j), nil
		}
		off += int64(len(buf))
	}
	return o.Size - 1, nil
}

// reusable reports whether the pieces on disk are man's: a predecessor of
// this worker staged the same share of the same objects in this boot.
func (s *s3Inputs) reusable(man s3Manifest) bool {
	data, err := os.ReadFile(filepath.Join(s.dir, manifestName))
	if err != nil {
		return false
	}
	var prev s3Manifest
	if json.Unmarshal(data, &prev) != nil {
		return false
	}
	a, _ := json.Marshal(prev)
	b, _ := json.Marshal(man)
	if !bytes.Equal(a, b) {
		return false
	}
	for n, p := range man.Pieces {
		fi, err := os.Stat(s.piecePath(p.Input, n))
		if err != nil || fi.Size() != p.To-p.From {
			return false
		}
	}
	return true
}

func (s *s3Inputs) piecePath(input, n int) string {
	return filepath.Join(s.dir, strconv.Itoa(input), fmt.Sprintf("%08d", n))
}

// s3Chunk is how much of an object one GET downloads: a large object is
// fetched by several streams at once.
const s3Chunk = 32 << 20

// s3Streams is how many GETs run at once.
const s3Streams = 8

// download writes the pieces, s3Chunk ranges at a time, s3Streams at once.
func (s *s3Inputs) download(ctx context.Context, pieces []s3Object) (int64, error) {
	type chunk struct {
		piece    int
		off, len int64 // within the piece
	}
	var chunks []chunk
	for n, p := range pieces {
		f, err := os.Create(s.piecePath(p.Input, n))
		if err == nil {
			err = f.Truncate(p.To - p.From)
			f.Close()
		}
		if err != nil {
			return 0, fmt.Errorf("dsort: stage input: %w", err)
		}
		for off := int64(0); off < p.To-p.From; off += s3Chunk {
			chunks = append(chunks, chunk{n, off, min(s3Chunk, p.To-p.From-off)})
		}
	}
	var total int64
	for _, c := range chunks {
		total += c.len
	}
	err := par.Do(ctx, len(chunks), s3Streams, func(ctx context.Context, i int) error {
		c := chunks[i]
		p := pieces[c.piece]
		return s.fetch(ctx, p, s.piecePath(p.Input, c.piece), c.off, c.len)
	})
	if err != nil {
		return total, err
	}
	// On disk before the sort: pages left dirty would be written back
	// while the shuffle writes its pieces, and past the kernel's dirty
	// limit every write of the job waits for the disk (the shuffle took
	// 2.7 times as long).
	return total, par.Do(ctx, len(pieces), s3Streams, func(ctx context.Context, n int) error {
		f, err := os.Open(s.piecePath(pieces[n].Input, n))
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			return fmt.Errorf("dsort: stage input: %w", err)
		}
		return nil
	})
}

// s3ReadRetry asks again for what is left of a range whose read failed
// with a transient error (s3.Transient): a connection reset half-way
// through a 32 MiB body, a store that answered 503. minio-go retries a
// request that fails, not a body that stops. MaxAttempts counts the tries
// in a row that read nothing: one that made progress starts the count and
// the delays again (a long range over a flaky link keeps going).
var s3ReadRetry = backoff.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second, MaxAttempts: 8}

// errStage marks a failure to write the staged copy: not the store's, and
// not retried.
var errStage = errors.New("dsort: stage input")

// fetch copies n bytes of piece p from its offset off into the file at
// path, at off; a read cut short resumes where it stopped (s3ReadRetry).
func (s *s3Inputs) fetch(ctx context.Context, p s3Object, path string, off, n int64) error {
	bs := s.stores[p.Input]
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", errStage, err)
	}
	defer f.Close()
	err = s.readResuming(ctx, bs, p, f, off, n)
	if errors.Is(err, provider.ErrNotFound) {
		err = fmt.Errorf("it was deleted while the worker read it: %w", err)
	}
	if errors.Is(err, s3.ErrChanged) {
		err = fmt.Errorf("it was written again since the worker listed it (run the job again to sort the new version): %w", err)
	}
	if errors.Is(err, errStage) {
		return err
	}
	if err != nil {
		return fmt.Errorf("dsort: read %s: %w", bs.URL(p.Key), err)
	}
	fsutil.StartWriteback(f, off, n)
	return f.Close()
}

// readResuming copies n bytes of piece p from its offset off into f at
// off, asking again for what is left after a transient failure
// (s3ReadRetry).
func (s *s3Inputs) readResuming(ctx context.Context, bs *s3.BlobStore, p s3Object, f *os.File, off, n int64) error {
	var err error
	var done int64
	for idle := 0; ; {
		var got int64
		got, err = fetchRange(ctx, bs, p, f, p.From+off+done, off+done, n-done)
		done += got
		if err == nil && done == n {
			break
		}
		if err == nil {
			// The body ended early without an error: asked again, a
			// shrunk object answers with a bad range (not retried).
			err = fmt.Errorf("got %d bytes of %d; did the object change?", done, n)
		} else if errors.Is(err, errStage) || !s3.Transient(err) {
			break
		}
		if got > 0 {
			idle = 0
		}
		if idle++; idle >= s3ReadRetry.MaxAttempts {
			break
		}
		s.logger.Info("an S3 read was cut short; asking for the rest", "url", bs.URL(p.Key), "got", done, "of", n, "err", err)
		if serr := backoff.Sleep(ctx, s3ReadRetry.Delay(idle-1)); serr != nil {
			err = errors.Join(err, serr)
			break
		}
	}
	return err
}

// fetchRange copies n bytes of object o (the version listed: its ETag)
// from its offset from into f at off and returns how many it wrote.
func fetchRange(ctx context.Context, bs *s3.BlobStore, o s3Object, f *os.File, from, off, n int64) (int64, error) {
	rc, err := bs.GetRangeOf(ctx, o.Key, o.ETag, from, n)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return copyLarge(f, off, rc, n)
}

// copyLarge copies up to n bytes of r into f at off in writes of 4 MiB: a
// body read as it arrives comes in pieces of a few KiB, and the page cache
// then holds the file in small pages, which the sort's random reads of the
// mapped input pay for in TLB misses (its gather took 7 times as long).
func copyLarge(f *os.File, off int64, r io.Reader, n int64) (int64, error) {
	buf := make([]byte, min(n, 4<<20))
	var done int64
	for done < n {
		k, err := io.ReadFull(r, buf[:min(int64(len(buf)), n-done)])
		if k > 0 {
			if _, werr := f.WriteAt(buf[:k], off+done); werr != nil {
				return done, fmt.Errorf("%w: %w", errStage, werr)
			}
			done += int64(k)
		}
		if err == io.EOF {
			return done, nil
		}
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// closeStores closes the stores' idle connections.
func (s *s3Inputs) closeStores() {
	for _, bs := range s.stores {
		bs.Close()
	}
}

// openS3 opens the S3 inputs and output (a bad URL, credential or bucket
// fails here, before the worker registers) and stages the inputs.
func (w *Worker) openS3(ctx context.Context) error {
	in := &s3Inputs{dir: w.dir.s3in(), args: w.cfg.Inputs, share: w.cfg.Share, format: w.format, stores: map[int]*s3.BlobStore{}, logger: w.cfg.Logger}
	for i, p := range w.cfg.Inputs {
		if !isS3(p) {
			continue
		}
		bs, err := openS3(ctx, p)
		if err != nil {
			in.closeStores()
			return err
		}
		in.stores[i] = bs
	}
	if isS3(w.cfg.Output) {
		bs, err := openS3(ctx, w.cfg.Output)
		if err != nil {
			in.closeStores()
			return err
		}
		w.out.remote = &s3Output{url: w.cfg.Output, bs: bs, dir: w.out.dir}
		job, err := w.out.finishCommit()
		if err != nil {
			in.closeStores()
			return err
		}
		if job != "" { // that job is over and committed now: nothing else to do
			in.closeStores()
			w.mu.Lock()
			w.completed = job
			w.mu.Unlock()
			return errNothingToDo
		}
	}
	if len(in.stores) == 0 {
		return nil
	}
	w.s3in = in
	objs, err := in.listObjects(ctx)
	if err != nil {
		return err
	}
	if len(in.stores) < len(w.cfg.Inputs) {
		in.print = nil // local dirs too: printed as files once staged (readInputs)
	}
	if in.print != nil && w.alreadyCompleted(in.print) {
		in.closeStores()
		return errNothingToDo
	}
	start := time.Now()
	n, err := in.stage(ctx, objs)
	if err != nil {
		return err
	}
	if n == 0 {
		w.cfg.Logger.Info("reusing the S3 input a previous process of this worker downloaded", "dir", in.dir)
	} else {
		w.cfg.Logger.Info("S3 input downloaded", "bytes", n, "share", w.cfg.Share.String(), "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
