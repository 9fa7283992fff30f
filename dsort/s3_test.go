package dsort

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/linesort"
	"github.com/gantryhq/gantry/linesort/linetest"
	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/record/recordtest"
	"github.com/gantryhq/gantry/workspace/provider/s3"
)

// testBucket is a fresh bucket on the test MinIO, removed with its objects
// when the test ends; the credentials are set in the environment, where
// the sort reads them.
type testBucket struct {
	t        *testing.T
	endpoint string
	name     string
	bs       *s3.BlobStore
}

func newTestBucket(t *testing.T) *testBucket {
	t.Helper()
	ep := testutil.S3Endpoint(t)
	t.Setenv("AWS_ACCESS_KEY_ID", testutil.S3AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testutil.S3SecretKey)
	b := make([]byte, 5)
	rand.Read(b)
	name := "dsort-test-" + hex.EncodeToString(b)
	bs, err := s3.New(t.Context(), s3.Config{Endpoint: ep, Bucket: name, CreateBucket: true})
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBucket{t: t, endpoint: ep, name: name, bs: bs}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		blobs, _ := bs.List(ctx, "")
		for _, o := range blobs {
			bs.Delete(ctx, o.Key)
		}
		bs.RemoveBucket(ctx)
		bs.Close()
	})
	return tb
}

// url is the s3:// URL of prefix in the bucket.
func (b *testBucket) url(prefix string) string {
	return "s3://" + b.name + "/" + prefix + "?endpoint=http://" + b.endpoint
}

func (b *testBucket) put(key string, data []byte) {
	b.t.Helper()
	if err := b.bs.Put(b.t.Context(), key, bytes.NewReader(data)); err != nil {
		b.t.Fatal(err)
	}
}

func (b *testBucket) get(key string) []byte {
	b.t.Helper()
	rc, err := b.bs.Get(b.t.Context(), key)
	if err != nil {
		b.t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		b.t.Fatal(err)
	}
	return data
}

// pending counts the multipart uploads not completed of the keys.
func (b *testBucket) pending(keys ...string) int {
	b.t.Helper()
	n := 0
	for _, k := range keys {
		ids, err := b.bs.PendingUploadsOf(b.t.Context(), k)
		if err != nil {
			b.t.Fatal(err)
		}
		n += len(ids)
	}
	return n
}

// keys lists the keys under prefix (relative to it).
func (b *testBucket) keys(prefix string) []string {
	b.t.Helper()
	blobs, err := b.bs.List(b.t.Context(), prefix)
	if err != nil {
		b.t.Fatal(err)
	}
	var out []string
	for _, o := range blobs {
		out = append(out, strings.TrimPrefix(o.Key, prefix))
	}
	slices.Sort(out)
	return out
}

// download copies each worker's S3 output prefix into a local dir (the
// done marker too) for checkOutput, after checking that the prefix holds
// only partitions and the marker: no staged object is left.
func (b *testBucket) download(prefixes []string) []string {
	b.t.Helper()
	var dirs []string
	for _, prefix := range prefixes {
		dir := b.t.TempDir()
		hasMarker := false
		for _, k := range b.keys(prefix) {
			if k == record.DoneMarker {
				hasMarker = true
			} else if !isPartitionName(k) {
				b.t.Fatalf("output %s holds %q, want only partition.<n> and the marker", prefix, k)
			}
			if err := os.WriteFile(filepath.Join(dir, k), b.get(prefix+k), 0o644); err != nil {
				b.t.Fatal(err)
			}
		}
		if !hasMarker {
			b.t.Fatalf("output %s has no done marker", prefix)
		}
		dirs = append(dirs, dir)
	}
	return dirs
}

// TestS3JobDividesObjectsByShare: three workers given the same S3 input
// and the shares 0/3, 1/3, 2/3 sort every record of its objects exactly
// once — objects of many sizes, an empty one, one large enough to be cut
// between all three — into S3 output prefixes that hold only partition.<n>
// objects and the marker; a worker's temp dir is gone after the job.
func TestS3JobDividesObjectsByShare(t *testing.T) {
	b := newTestBucket(t)
	rng := mrand.New(mrand.NewPCG(7, 8))
	var sum dataSum
	for i, n := range []int{500, 0, 20000, 1, 3000, 777, 12000} {
		data := recordtest.Random(rng, n, recordtest.Options{ASCII: i%2 == 0})
		for off := 0; off < len(data); off += record.Size {
			sum.add(data[off : off+record.Size])
		}
		b.put(fmt.Sprintf("in/obj%02d", i), data)
	}
	b.put("other/not-mine", recordtest.Random(rng, 10, recordtest.Options{})) // beside the prefix: not input
	b.put("in/.hidden", []byte("not input either"))
	root := t.TempDir()
	var wcfgs []WorkerConfig
	var outs []string
	for w := range 3 {
		outs = append(outs, fmt.Sprintf("out/w%d/", w))
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{b.url("in")}, Share: Share{w, 3}, Output: b.url(fmt.Sprintf("out/w%d", w)),
			Memory: 32 << 20, TempDir: filepath.Join(root, fmt.Sprint("tmp", w))})
	}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 3, HeartbeatInterval: 100 * time.Millisecond}, wcfgs)
	c.mustSucceed(t)
	checkOutput(t, b.download(outs), sum)
	for w := range 3 {
		if ents, _ := os.ReadDir(filepath.Join(root, fmt.Sprint("tmp", w))); len(ents) != 0 {
			t.Errorf("worker %d left %d entries in its temp dir", w, len(ents))
		}
	}
}

// TestS3LinesShareCutsAtLineStarts: lines objects cut between workers by
// bytes are cut at line starts — every line sorted once, whole: the
// partitions in order are GNU sort's output for the objects.
func TestS3LinesShareCutsAtLineStarts(t *testing.T) {
	b := newTestBucket(t)
	args := []string{"-t,", "-k2,2", "-k3,3n"}
	o, err := linesort.ParseArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	var files []string
	for i, data := range [][]byte{csvLines(1, 30000), linetest.Duplicates(2, 4000), []byte("no final newline,x,1"), {}, csvLines(3, 100)} {
		b.put(fmt.Sprintf("in/f%d", i), data)
		p := filepath.Join(local, fmt.Sprint("f", i))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	root := t.TempDir()
	var wcfgs []WorkerConfig
	for w := range 4 {
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{b.url("in")}, Share: Share{w, 4}, Output: filepath.Join(root, fmt.Sprint("out", w)),
			Memory: 32 << 20, Lines: &o, TempDir: filepath.Join(root, fmt.Sprint("tmp", w))})
	}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 4, Lines: &o, HeartbeatInterval: 100 * time.Millisecond}, wcfgs)
	c.mustSucceed(t)
	var outs []string
	for w := range 4 {
		outs = append(outs, filepath.Join(root, fmt.Sprint("out", w)))
	}
	gnu, err := exec.LookPath("sort")
	if err != nil {
		t.Fatal(err)
	}
	got, want := readPartitions(t, outs), linetest.GNUSort(t, gnu, args, files)
	if !bytes.Equal(got, want) {
		t.Fatalf("the job's output differs from GNU sort's: %s", firstLineDiff(got, want))
	}
}

// TestS3BadStoreFailsAtStart: a wrong secret, a missing bucket, a bad URL,
// a prefix with no objects or S3 inputs that overlap fail the worker before
// it registers, with a message naming the cause.
func TestS3BadStoreFailsAtStart(t *testing.T) {
	b := newTestBucket(t)
	for _, c := range []struct {
		name, input, want string
		env               map[string]string
	}{
		{"secret", b.url("in"), "refused the credentials", map[string]string{"AWS_SECRET_ACCESS_KEY": "wrong"}},
		{"bucket", strings.Replace(b.url("in"), b.name, b.name+"-missing", 1), "does not exist", nil},
		{"url", "s3://" + b.name + "/in", "endpoint= is required", nil},
		{"empty", b.url("nothing-here"), "no objects under", nil},
		{"overlap", b.url("in") + " " + b.url("in/sub"), "overlaps another S3 input", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			w, err := NewWorker(WorkerConfig{Master: "127.0.0.1:1", Inputs: strings.Fields(c.input), Output: t.TempDir(), Memory: 32 << 20,
				TempDir: t.TempDir(), RegisterTimeout: time.Second})
			if err == nil {
				err = w.Run(t.Context())
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("worker with %s: %v, want an error saying %q", c.name, err, c.want)
			}
		})
	}
}

// TestS3KilledMidUploadLeavesNoPartialPartition: a worker process killed
// while its partitions go up to S3 leaves nothing visible in its output
// prefix — its uploads are pending, not completed — and, restarted,
// finishes the job: the outputs hold exactly the input's records, sorted,
// and no upload is left pending.
func TestS3KilledMidUploadLeavesNoPartialPartition(t *testing.T) {
	b := newTestBucket(t)
	rng := mrand.New(mrand.NewPCG(3, 4))
	j := &job{t: t, root: t.TempDir()}
	for i := range 6 {
		data := recordtest.Random(rng, 4000+i*1000, recordtest.Options{ASCII: i%2 == 1})
		for off := 0; off < len(data); off += record.Size {
			j.sum.add(data[off : off+record.Size])
		}
		b.put(fmt.Sprintf("in/part-%d", i), data)
	}
	for w := range 3 {
		j.workers = append(j.workers, &workerSpec{bind: fmt.Sprintf("127.0.0.%d", w+2), inputs: []string{b.url("in")},
			out: b.url(fmt.Sprintf("out/w%d", w)), tmp: filepath.Join(j.root, fmt.Sprint("tmp", w)), extra: []string{"--share", fmt.Sprintf("%d/3", w)}})
	}
	j.master = startProc(t, "master", nil, "sort", "master", "3", "--heartbeat", "200ms", "--partition-size", "64KiB")
	j.addr = j.master.waitLine(true, regexp.MustCompile(`^\S+:\d+$`), 30*time.Second).text
	const victim = 1
	v := j.startStopping(victim, "upload-partition", "Merging")
	if err := v.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	v.wait(10 * time.Second)
	prefix := fmt.Sprintf("out/w%d/", victim)
	if keys := b.keys(prefix); len(keys) != 0 {
		t.Fatalf("killed mid-upload, the output shows %q; want nothing before the commit", keys)
	}
	var keys []string // the victim's partitions
	staged, _ := filepath.Glob(filepath.Join(j.workers[victim].tmp, "*", "s3out", ".gantry-dsort-*"+record.PartitionPrefix+"*"))
	for _, f := range staged {
		keys = append(keys, prefix+record.PartitionPrefix+f[strings.LastIndex(f, ".")+1:])
	}
	if b.pending(keys...) == 0 {
		t.Fatalf("no pending upload of %q when the upload's fault point was reached", keys)
	}
	j.startWorker(victim)
	if code := j.master.wait(2 * time.Minute); code != 0 {
		t.Fatalf("master exited %d", code)
	}
	for i, w := range j.workers {
		if code := w.proc.wait(30 * time.Second); code != 0 {
			t.Fatalf("worker %d exited %d", i, code)
		}
	}
	checkOutput(t, b.download([]string{"out/w0/", "out/w1/", "out/w2/"}), j.sum)
	for w := range 3 {
		for _, k := range b.keys(fmt.Sprintf("out/w%d/", w)) {
			if n := b.pending(fmt.Sprintf("out/w%d/%s", w, k)); n != 0 {
				t.Fatalf("%d uploads of out/w%d/%s left pending after the job", n, w, k)
			}
		}
	}
	if n := b.pending(keys...); n != 0 {
		t.Fatalf("%d uploads of the victim's partitions left pending after the job", n)
	}
}

// TestS3FailedJobLeavesThePreviousOutput: a job that fails after its
// partitions went up (pending) leaves the S3 outputs of the job before it
// as they were — its marker and partitions — and no upload pending.
func TestS3FailedJobLeavesThePreviousOutput(t *testing.T) {
	b := newTestBucket(t)
	rng := mrand.New(mrand.NewPCG(5, 6))
	put := func(prefix string, n int) dataSum {
		var sum dataSum
		for i := range 2 {
			data := recordtest.Random(rng, n, recordtest.Options{})
			for off := 0; off < len(data); off += record.Size {
				sum.add(data[off : off+record.Size])
			}
			b.put(fmt.Sprintf("%s/obj%d", prefix, i), data)
		}
		return sum
	}
	first, _ := put("in1", 3000), put("in2", 5000)
	root := t.TempDir()
	cfgs := func(in string) []WorkerConfig {
		var out []WorkerConfig
		for w := range 2 {
			out = append(out, WorkerConfig{Inputs: []string{b.url(in)}, Share: Share{w, 2}, Output: b.url(fmt.Sprintf("out/w%d", w)),
				Memory: 32 << 20, TempDir: filepath.Join(root, fmt.Sprint("tmp", w))})
		}
		return out
	}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 2, HeartbeatInterval: 100 * time.Millisecond}, cfgs("in1"))
	c.mustSucceed(t)
	outs := []string{"out/w0/", "out/w1/"}
	before := map[string][]byte{}
	for _, o := range outs {
		for _, k := range b.keys(o) {
			before[o+k] = b.get(o + k)
		}
	}
	// The second job: worker 0 is interrupted once its partitions are up.
	second := cfgs("in2")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	second[0].FaultHook = func(fctx context.Context, point string) {
		if point == "upload-partition" {
			cancel()
			<-fctx.Done()
		}
	}
	c = startCluster(t, t.Context(), MasterConfig{Workers: 2, HeartbeatInterval: 100 * time.Millisecond}, nil)
	c.startWorker(t, ctx, second[0])
	c.startWorker(t, t.Context(), second[1])
	werrs, merr := c.wait(t)
	if merr == nil || werrs[0] == nil {
		t.Fatalf("the second job succeeded (master %v, workers %v); want it failed", merr, werrs)
	}
	after := map[string][]byte{}
	for _, o := range outs {
		for _, k := range b.keys(o) {
			after[o+k] = b.get(o + k)
			if n := b.pending(o + k); n != 0 {
				t.Errorf("%d uploads of %s left pending by the failed job", n, o+k)
			}
		}
	}
	if len(after) != len(before) {
		t.Fatalf("after the failed job the outputs hold %d objects, before it %d", len(after), len(before))
	}
	for k, v := range before {
		if !bytes.Equal(after[k], v) {
			t.Fatalf("the failed job changed %s", k)
		}
	}
	checkOutput(t, b.download(outs), first)
}

// TestS3CommitCutShortIsFinished: a commit cut short (one upload completed,
// the other still pending, no marker) is finished by the next process of
// the worker from its intent and journal alone, with no master: both
// partitions whole, the marker last, nothing left pending.
func TestS3CommitCutShortIsFinished(t *testing.T) {
	b := newTestBucket(t)
	ctx := t.Context()
	bs, err := s3.New(ctx, s3.Config{Endpoint: b.endpoint, Bucket: b.name, Prefix: "out/w0"})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	dir, job := t.TempDir(), "0123456789abcdef"
	rng := mrand.New(mrand.NewPCG(9, 9))
	mk := doneMarker{Job: job, Partitions: []int{4, 5}}
	data := map[int][]byte{}
	for _, p := range mk.Partitions {
		data[p] = recordtest.Random(rng, 1000+p, recordtest.Options{})
		if err := os.WriteFile(filepath.Join(dir, stagedPrefix(job)+partitionName(p)), data[p], 0o644); err != nil {
			t.Fatal(err)
		}
		mk.Bytes = append(mk.Bytes, int64(len(data[p])))
	}
	r := &s3Output{url: b.url("out/w0"), bs: bs, dir: dir}
	r.load(job)
	for _, p := range mk.Partitions {
		if err := r.uploadOne(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := bs.CompleteUpload(ctx, r.pending[4]); err != nil { // the cut-short commit got this far
		t.Fatal(err)
	}
	intent, _ := json.Marshal(mk)
	if err := os.WriteFile(filepath.Join(dir, commitIntent), intent, 0o644); err != nil {
		t.Fatal(err)
	}
	o := output{dir: dir, logger: slog.New(slog.DiscardHandler), remote: &s3Output{url: b.url("out/w0"), bs: bs, dir: dir}}
	got, err := o.finishCommit()
	if err != nil || got != job {
		t.Fatalf("finishCommit = %q, %v; want %q, nil", got, err, job)
	}
	for _, p := range mk.Partitions {
		if !bytes.Equal(b.get("out/w0/"+partitionName(p)), data[p]) {
			t.Fatalf("%s differs from the staged partition", partitionName(p))
		}
		if n := b.pending("out/w0/" + partitionName(p)); n != 0 {
			t.Fatalf("%d uploads of %s left pending", n, partitionName(p))
		}
	}
	var marker doneMarker
	if err := json.Unmarshal(b.get("out/w0/"+record.DoneMarker), &marker); err != nil || marker.Job != job {
		t.Fatalf("marker %+v, %v; want job %s", marker, err, job)
	}
	if _, err := os.Stat(filepath.Join(dir, commitIntent)); !os.IsNotExist(err) {
		t.Fatalf("the commit's intent is still there: %v", err)
	}
}

// TestS3SharesAreChecked: the master refuses a worker whose --share another
// worker of the job on the same S3 inputs has, or whose N is not the job's
// worker count (half the input would be sorted and the job succeed).
func TestS3SharesAreChecked(t *testing.T) {
	b := newTestBucket(t)
	b.put("in/a", recordtest.Random(mrand.New(mrand.NewPCG(1, 1)), 100, recordtest.Options{}))
	root := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := func(w int, share Share) WorkerConfig {
		return WorkerConfig{Inputs: []string{b.url("in")}, Share: share, Output: filepath.Join(root, fmt.Sprint("out", w)),
			Memory: 32 << 20, TempDir: filepath.Join(root, fmt.Sprint("tmp", w)), RegisterTimeout: 5 * time.Second}
	}
	c := startCluster(t, ctx, MasterConfig{Workers: 2, HeartbeatInterval: 100 * time.Millisecond}, []WorkerConfig{cfg(0, Share{0, 2})})
	testutil.WaitFor(t, 30*time.Second, "worker 0 to register", func() (bool, string) {
		c.master.mu.Lock()
		defer c.master.mu.Unlock()
		return len(c.master.members) == 1, "not yet"
	})
	for _, x := range []struct {
		share Share
		want  string
	}{{Share{0, 2}, "is worker 0's already"}, {Share{1, 3}, "this job has 2 workers"}} {
		_, errc := c.startWorker(t, ctx, cfg(1, x.share))
		if err := <-errc; err == nil || !strings.Contains(err.Error(), x.want) {
			t.Fatalf("a worker with --share %s: %v; want an error saying %q", x.share, err, x.want)
		}
		c.workers, c.workerErr = c.workers[:1], c.workerErr[:1] // not the job's
	}
	c.startWorker(t, ctx, cfg(1, Share{1, 2}))
	c.mustSucceed(t)
}

// TestS3ReadCutShortIsResumed: a store connection that drops half-way
// through a body (a reset, a proxy's timeout) costs a re-request of what is
// left of that range, not the job: through a proxy that cuts the first
// three ranged GETs after 64 KiB, a two-worker job on S3 input succeeds
// with every record sorted once.
func TestS3ReadCutShortIsResumed(t *testing.T) {
	b := newTestBucket(t)
	rng := mrand.New(mrand.NewPCG(9, 10))
	var sum dataSum
	for i := range 6 {
		data := recordtest.Random(rng, 3000, recordtest.Options{ASCII: i%2 == 0})
		for off := 0; off < len(data); off += record.Size {
			sum.add(data[off : off+record.Size])
		}
		b.put(fmt.Sprintf("in/obj%02d", i), data)
	}
	proxy := newCuttingProxy(t, b.endpoint, 3)
	in := "s3://" + b.name + "/in?endpoint=http://" + proxy.addr
	root := t.TempDir()
	var wcfgs []WorkerConfig
	var outs []string
	for w := range 2 {
		outs = append(outs, filepath.Join(root, fmt.Sprint("out", w)))
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{in}, Share: Share{w, 2}, Output: outs[w],
			Memory: 32 << 20, TempDir: filepath.Join(root, fmt.Sprint("tmp", w))})
	}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 2, HeartbeatInterval: 100 * time.Millisecond}, wcfgs)
	c.mustSucceed(t)
	if got := proxy.cut.Load(); got != 3 {
		t.Fatalf("the proxy cut %d bodies, want 3 (the test did not test the resumption)", got)
	}
	checkOutput(t, outs, sum)
}

// cuttingProxy is a reverse proxy on loopback to the test MinIO that cuts
// the body of the first ranged GETs (206) after 64 KiB: the connection is
// dropped half-way, as a reset would. cut counts the bodies it cut, gets
// the ranged GETs.
type cuttingProxy struct {
	addr string
	left atomic.Int32 // bodies still to cut
	cut  atomic.Int32
	gets atomic.Int32 // ranged GETs answered (206)
}

func newCuttingProxy(t *testing.T, endpoint string, cuts int) *cuttingProxy {
	t.Helper()
	target, err := url.Parse("http://" + endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{}
	p.left.Store(int32(cuts))
	rp := httputil.NewSingleHostReverseProxy(target) // keeps the Host header the client signed
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ModifyResponse = func(r *http.Response) error {
		if r.StatusCode == http.StatusPartialContent {
			p.gets.Add(1)
		}
		if r.StatusCode == http.StatusPartialContent && p.left.Add(-1) >= 0 {
			p.cut.Add(1)
			r.Body = &cutBody{ReadCloser: r.Body, left: 64 << 10}
		}
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	p.addr = strings.TrimPrefix(srv.URL, "http://")
	return p
}

// cutBody fails its reads after left bytes.
type cutBody struct {
	io.ReadCloser
	left int
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("cut by the test proxy")
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

// TestS3RerunOfACompletedJobDownloadsNothing: seed 000's "already
// completed, nothing to do" holds for S3 inputs too. Their print is the
// listing (keys, sizes, times, ETags, the share), not the staged copies,
// which are new files at every download: re-run with no master, each
// worker of a finished job exits at once without a single GET of an
// object (through a proxy that counts them); with an object rewritten, or
// another share, it has work to do.
func TestS3RerunOfACompletedJobDownloadsNothing(t *testing.T) {
	b := newTestBucket(t)
	rng := mrand.New(mrand.NewPCG(11, 12))
	for i := range 4 {
		b.put(fmt.Sprintf("in/obj%02d", i), recordtest.Random(rng, 2000, recordtest.Options{}))
	}
	proxy := newCuttingProxy(t, b.endpoint, 0)
	in := "s3://" + b.name + "/in?endpoint=http://" + proxy.addr
	root := t.TempDir()
	var wcfgs []WorkerConfig
	for w := range 2 {
		wcfgs = append(wcfgs, WorkerConfig{Inputs: []string{in}, Share: Share{w, 2}, Output: filepath.Join(root, fmt.Sprint("out", w)),
			Memory: 32 << 20, TempDir: filepath.Join(root, fmt.Sprint("tmp", w))})
	}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 2, HeartbeatInterval: 100 * time.Millisecond}, wcfgs)
	c.mustSucceed(t)
	if proxy.gets.Load() == 0 {
		t.Fatal("the job read no object through the proxy")
	}
	rerun := func(wc WorkerConfig) (string, error) {
		wc.Master, wc.RegisterTimeout = "127.0.0.1:1", time.Second // nobody listens
		w, err := NewWorker(wc)
		if err != nil {
			t.Fatal(err)
		}
		err = w.Run(t.Context())
		return w.AlreadyCompleted(), err
	}
	proxy.gets.Store(0)
	for i, wc := range wcfgs {
		if job, err := rerun(wc); job == "" || err != nil {
			t.Fatalf("worker %d re-run: already completed %q, %v; want the job's", i, job, err)
		}
	}
	if n := proxy.gets.Load(); n != 0 {
		t.Fatalf("the re-runs read %d object ranges, want none", n)
	}
	other := wcfgs[0]
	other.Share = Share{1, 2} // worker 1's share into worker 0's output: not what it holds
	if job, err := rerun(other); job != "" || err == nil {
		t.Fatalf("another share: already completed %q, %v; want work to do (and no master)", job, err)
	}
	b.put("in/obj01", recordtest.Random(rng, 2000, recordtest.Options{}))
	if job, err := rerun(wcfgs[0]); job != "" || err == nil {
		t.Fatalf("an object rewritten: already completed %q, %v; want work to do (and no master)", job, err)
	}
}

// TestS3FlakyRangeKeepsGoingWhileItProgresses: the tries of a range are
// counted while they read nothing; one that read part of it starts the
// count again. One 2 MB object read as one range through a proxy that
// cuts twelve bodies in a row after 64 KiB each (more cuts than
// s3ReadRetry's tries) is still read whole, and sorted.
func TestS3FlakyRangeKeepsGoingWhileItProgresses(t *testing.T) {
	b := newTestBucket(t)
	data := recordtest.Random(mrand.New(mrand.NewPCG(15, 16)), 20000, recordtest.Options{})
	var sum dataSum
	for off := 0; off < len(data); off += record.Size {
		sum.add(data[off : off+record.Size])
	}
	b.put("in/big", data)
	const cuts = 12
	if cuts <= s3ReadRetry.MaxAttempts {
		t.Fatalf("cut %d bodies: no more than the %d tries would not test the renewal", cuts, s3ReadRetry.MaxAttempts)
	}
	proxy := newCuttingProxy(t, b.endpoint, cuts)
	root := t.TempDir()
	out := filepath.Join(root, "out")
	wc := WorkerConfig{Inputs: []string{"s3://" + b.name + "/in?endpoint=http://" + proxy.addr}, Output: out,
		Memory: 32 << 20, TempDir: filepath.Join(root, "tmp")}
	c := startCluster(t, t.Context(), MasterConfig{Workers: 1, HeartbeatInterval: 100 * time.Millisecond}, []WorkerConfig{wc})
	c.mustSucceed(t)
	if got := proxy.cut.Load(); got != cuts {
		t.Fatalf("the proxy cut %d bodies, want %d", got, cuts)
	}
	checkOutput(t, []string{out}, sum)
}
