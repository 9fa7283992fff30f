package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/handoff"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/docker"
	"github.com/gantryhq/gantry/workspace/provider/fs"
	"github.com/gantryhq/gantry/workspace/provider/s3"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// The Docker engine down or S3 unreachable.
// Operations fail with a clear reason, are retried per the policy, and
// nothing is marked archived that was not fully written.

// deadDocker is the real Docker provider pointed at a socket nobody serves.
func deadDocker(t *testing.T) *docker.Provider {
	t.Helper()
	p, err := docker.New(docker.Config{Host: "unix://" + filepath.Join(t.TempDir(), "no-docker.sock"), Image: "unused"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// runRecAndMon runs a reconciler and a monitor over st until the test ends.
func runRecAndMon(t *testing.T, st *store.Store, c provider.Container, s provider.Storage, cfg Config) {
	t.Helper()
	hb := hints.NewLocal()
	if cfg.Interval == 0 {
		cfg.Interval = 50 * time.Millisecond
	}
	cfg.Handoff = handoff.New()
	rec, err := NewReconciler(cfg, st, c, s, hb)
	if err != nil {
		t.Fatal(err)
	}
	mon := singletons.NewHealthMonitor(singletons.MonitorConfig{Interval: 50 * time.Millisecond, Handoff: cfg.Handoff}, st, c, s, hb)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{rec.Run, mon.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// seedObserved creates a workspace and sets its observed status as if the
// monitor had seen it (with its volume provisioned when not PENDING).
func seedObserved(t *testing.T, st *store.Store, s provider.Storage, name string, observed, desired workspace.Status) workspace.Workspace {
	t.Helper()
	ctx := t.Context()
	w, err := st.Create(ctx, workspace.NewWorkspace{Name: name, Desired: observed}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if observed != workspace.Pending {
		if err := s.Provision(ctx, w.ID); err != nil {
			t.Fatal(err)
		}
	}
	storetest.Force(t, st, w.ID, map[string]any{"observed_status": observed, "observed_at": time.Now(), "desired_state": desired})
	w, err = st.Get(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// With the engine down, the monitor cannot observe: the row shows why
// (ObserveFailed, the provider's error), keeps the last status seen, is not
// terminal, and is cleared by the next successful observation.
func TestObserveFailureIsVisibleAndCleared(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	dead := deadDocker(t)
	var down atomic.Bool
	down.Store(true)
	c := provider.ContainerFuncs{
		StartFunc: dead.Start, StopFunc: dead.Stop,
		ObserveFunc: func(ctx context.Context, id string) (provider.ContainerState, error) {
			if down.Load() {
				return dead.Observe(ctx, id)
			}
			return provider.Missing, nil // the engine is back: nothing runs
		},
	}
	storage := &archive.Storage{Root: t.TempDir(), Blobs: &fs.BlobStore{Dir: t.TempDir()}}
	w := seedObserved(t, st, storage, "eyes-shut", workspace.Standby, workspace.Standby)
	runRecAndMon(t, st, c, storage, Config{})

	var got workspace.Workspace
	wstest.WaitFor(t, 10*time.Second, "error_info ObserveFailed", func() (bool, string) {
		got, _ = st.Get(t.Context(), w.ID)
		return got.ErrorInfo != nil && got.ErrorInfo.Reason == workspace.ReasonObserveFailed, wstest.Describe(got)
	})
	if !errors.Is(docker.ErrEngineUnreachable, provider.ErrUnreachable) {
		t.Error("docker.ErrEngineUnreachable does not match provider.ErrUnreachable")
	}
	if e := got.ErrorInfo; e.IsTerminal || !strings.Contains(e.LastError, "docker: engine unreachable") || !strings.Contains(e.LastError, "no-docker.sock") {
		t.Fatalf("error_info = %+v; want non-terminal, last_error naming the engine and its socket", e)
	}
	if got.ObservedStatus != workspace.Standby || got.ErrorCount != 0 || got.Operation != workspace.OpNone {
		t.Fatalf("an observe failure changed the workspace: %s", wstest.Describe(got))
	}
	// Passes while the engine stays down do not rewrite the row.
	first := got.UpdatedAt
	time.Sleep(300 * time.Millisecond) // real time: several monitor passes run while nothing changes
	if again, _ := st.Get(t.Context(), w.ID); !again.UpdatedAt.Equal(first) {
		t.Errorf("the row was rewritten while nothing changed: %v → %v", first, again.UpdatedAt)
	}

	down.Store(false)
	wstest.WaitFor(t, 10*time.Second, "error_info cleared", func() (bool, string) {
		got, _ = st.Get(t.Context(), w.ID)
		return got.ErrorInfo == nil, wstest.Describe(got)
	})
	if got.ObservedStatus != workspace.Standby {
		t.Fatalf("after recovery: %s", wstest.Describe(got))
	}
}

// The monitor never overwrites the reconciler's error info with its own.
func TestObserveFailureKeepsReconcilerErrorInfo(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	ctx := t.Context()
	w, err := st.Create(ctx, workspace.NewWorkspace{Name: "keep"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	theirs := &workspace.ErrorInfo{Reason: workspace.ReasonActionFailed, Operation: workspace.OpStarting, ErrorCount: 1, LastError: "boom", OccurredAt: time.Now().UTC()}
	storetest.Force(t, st, w.ID, map[string]any{"error_info": theirs})
	mine := &workspace.ErrorInfo{Reason: workspace.ReasonObserveFailed, LastError: "engine down", OccurredAt: time.Now().UTC()}
	if ok, err := st.SetObserveError(ctx, w.ID, mine, time.Now()); ok || err != nil {
		t.Fatalf("SetObserveError over the reconciler's info = %v, %v; want refused", ok, err)
	}
	if ok, err := st.ClearObserveError(ctx, w.ID, time.Now()); ok || err != nil {
		t.Fatalf("ClearObserveError of the reconciler's info = %v, %v; want refused", ok, err)
	}
	got, _ := st.Get(ctx, w.ID)
	if got.ErrorInfo == nil || got.ErrorInfo.Reason != workspace.ReasonActionFailed {
		t.Fatalf("error_info = %+v; want the reconciler's", got.ErrorInfo)
	}
}

// Starting with the Docker engine down: every attempt fails with reason
// Unreachable and the engine's error, the retries follow the
// backoff, and after MaxRetries the workspace is ERROR with RetryExceeded.
// The metrics count the calls at their source.
func TestDockerDownStartRetriesPerPolicy(t *testing.T) {
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	dead := deadDocker(t)
	var mu sync.Mutex
	var starts []time.Time
	c := provider.ContainerFuncs{
		StartFunc: func(ctx context.Context, s provider.Spec) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			return dead.Start(ctx, s)
		},
		StopFunc: dead.Stop,
		// The engine was up when the workspace was last observed; the
		// monitor's view is not what this test is about.
		ObserveFunc: func(context.Context, string) (provider.ContainerState, error) { return provider.Missing, nil },
	}
	storage := &archive.Storage{Root: t.TempDir(), Blobs: &fs.BlobStore{Dir: t.TempDir()}}
	w := seedObserved(t, st, storage, "no-engine", workspace.Standby, workspace.Running)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	const backoff = 200 * time.Millisecond
	runRecAndMon(t, st, c, storage, Config{MaxRetries: 2, RetryBackoff: backoff, Metrics: metrics})

	var got workspace.Workspace
	wstest.WaitFor(t, 10*time.Second, "first failure recorded", func() (bool, string) {
		got, _ = st.Get(t.Context(), w.ID)
		return got.ErrorInfo != nil && got.ErrorInfo.Reason == workspace.ReasonUnreachable, wstest.Describe(got)
	})
	if e := got.ErrorInfo; e.IsTerminal || e.Operation != workspace.OpStarting || !strings.Contains(e.LastError, "docker: engine unreachable") || got.NextRetryAt == nil {
		t.Fatalf("after the first failure: %s next_retry_at=%v; want Unreachable, not terminal, a retry planned", wstest.Describe(got), got.NextRetryAt)
	}
	wstest.WaitFor(t, 20*time.Second, "ERROR with RetryExceeded", func() (bool, string) {
		got, _ = st.Get(t.Context(), w.ID)
		return got.ObservedStatus == workspace.Error, wstest.Describe(got)
	})
	if e := got.ErrorInfo; e == nil || e.Reason != workspace.ReasonRetryExceeded || !e.IsTerminal || e.ErrorCount != 3 || !strings.Contains(e.LastError, "docker: engine unreachable") {
		t.Fatalf("final: %s; want RetryExceeded after 3 calls naming the engine", wstest.Describe(got))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 3 {
		t.Fatalf("Start called %d times; want 1 + MaxRetries(2) = 3", len(starts))
	}
	for i, want := range []time.Duration{backoff, 2 * backoff} {
		if gap := starts[i+1].Sub(starts[i]); gap < want {
			t.Errorf("retry %d came %v after the previous call; the policy says ≥ %v", i+1, gap, want)
		}
	}
	calls := wstest.MetricValue(t, reg, "gantry_ws_provider_calls_total", "type", "STARTING", "result", "unreachable")
	if calls != 3 {
		t.Errorf("gantry_ws_provider_calls_total{type=STARTING,result=unreachable} = %v; want 3", calls)
	}
	if ended := wstest.MetricValue(t, reg, "gantry_ws_operations_total", "type", "STARTING", "result", "error"); ended != 1 {
		t.Errorf("gantry_ws_operations_total{type=STARTING,result=error} = %v; want 1", ended)
	}
}

// cutProxy forwards TCP connections to upstream. Until up is called its
// port is closed; while cut > 0 it forwards at most cut bytes sent on a
// connection and then drops it: an upload cut short by the network.
type cutProxy struct {
	addr     string
	upstream string
	cut      atomic.Int64
	mu       sync.Mutex // mu protects ln and open
	ln       net.Listener
	open     map[net.Conn]bool // both ends of every proxied connection
	conns    sync.WaitGroup
}

func (p *cutProxy) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.track(c, true)
			p.conns.Add(1)
			go func() { defer p.conns.Done(); p.serve(c) }()
		}
	}()
}

func (p *cutProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open == nil {
		p.open = map[net.Conn]bool{}
	}
	if on {
		p.open[c] = true
	} else {
		delete(p.open, c)
	}
}

// close stops accepting and drops every connection (idle keep-alives too).
func (p *cutProxy) close() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
	}
	for c := range p.open {
		c.Close()
	}
	p.mu.Unlock()
	p.conns.Wait()
}

func (p *cutProxy) serve(c net.Conn) {
	defer p.track(c, false)
	defer c.Close()
	u, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	p.track(u, true)
	defer p.track(u, false)
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() {
		// Requests: forwarded until the connection has carried more than
		// the cut (read at each chunk, so changing it applies to
		// connections already open); then both sides are dropped.
		buf := make([]byte, 32<<10)
		var sent int64
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if cut := p.cut.Load(); cut > 0 && sent+int64(n) > cut {
					u.Write(buf[:cut-sent])
					break
				}
				if _, werr := u.Write(buf[:n]); werr != nil {
					break
				}
				sent += int64(n)
			}
			if err != nil {
				break
			}
		}
		c.Close()
		u.Close()
		done <- struct{}{}
	}()
	go func() { io.Copy(c, u); c.Close(); u.Close(); done <- struct{}{} }()
	<-done
	<-done
}

// Archiving to S3 while it is unreachable, then while the upload is cut
// short, then with S3 back: the failures are Unreachable and retried
// per the policy, no archive_key is recorded and no .meta exists until an
// archive was written whole, and the volume stays until then.
func TestS3UnreachableNeverMarksArchived(t *testing.T) {
	ep := os.Getenv("GANTRY_TEST_S3")
	if ep == "" {
		ep = "127.0.0.1:9000"
	}
	testutil.Ensure(t, "minio", ep)
	ctx := t.Context()
	tr := &http.Transport{DisableKeepAlives: true} // no idle connection outlives the test
	mc, err := minio.New(ep, &minio.Options{Creds: credentials.NewStaticV4("gantry", "gantry-secret", ""), BucketLookup: minio.BucketLookupPath, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	rand.Read(b)
	bucket := "gantry-unreach-" + hex.EncodeToString(b)
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for o := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			mc.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{})
		}
		for u := range mc.ListIncompleteUploads(ctx, bucket, "", true) {
			mc.RemoveIncompleteUpload(ctx, bucket, u.Key)
		}
		mc.RemoveBucket(ctx, bucket)
	})
	metas := func() []string {
		var out []string
		for o := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			if strings.HasSuffix(o.Key, ".meta") {
				out = append(out, o.Key)
			}
		}
		return out
	}

	proxy := &cutProxy{addr: testutil.FreeAddr(t), upstream: ep} // closed until up()
	t.Cleanup(proxy.close)
	blobs, err := s3.New(ctx, s3.Config{Endpoint: proxy.addr, Bucket: bucket, AccessKey: "gantry", SecretKey: "gantry-secret", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	storage := &archive.Storage{Root: t.TempDir(), Blobs: blobs}
	noContainer := provider.ContainerFuncs{
		StartFunc:   func(context.Context, provider.Spec) error { return errors.New("not used") },
		StopFunc:    func(context.Context, string) error { return nil },
		ObserveFunc: func(context.Context, string) (provider.ContainerState, error) { return provider.Missing, nil },
	}
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	w := seedObserved(t, st, storage, "to-archive", workspace.Standby, workspace.Pending)
	data := make([]byte, 3<<20) // incompressible: the archive is ~3 MiB
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(storage.VolumePath(w.ID), "data.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	runRecAndMon(t, st, noContainer, storage, Config{MaxRetries: 1, RetryBackoff: 300 * time.Millisecond})

	// 1. Port closed: Unreachable, retried once, then RetryExceeded.
	var got workspace.Workspace
	wstest.WaitFor(t, 20*time.Second, "first failure recorded", func() (bool, string) {
		got, _ = st.Get(ctx, w.ID)
		return got.ErrorInfo != nil && got.ErrorInfo.Reason == workspace.ReasonUnreachable, wstest.Describe(got)
	})
	if e := got.ErrorInfo; e.IsTerminal || e.Operation != workspace.OpArchiving || e.ErrorCount != 1 || got.NextRetryAt == nil {
		t.Fatalf("after the first failure: %s; want Unreachable during ARCHIVING, not terminal, a retry planned", wstest.Describe(got))
	}
	wstest.WaitFor(t, 20*time.Second, "ERROR after the retries", func() (bool, string) {
		got, _ = st.Get(ctx, w.ID)
		return got.ObservedStatus == workspace.Error, wstest.Describe(got)
	})
	if e := got.ErrorInfo; e.Reason != workspace.ReasonRetryExceeded || e.ErrorCount != 2 || !strings.Contains(e.LastError, "s3: endpoint unreachable") || !strings.Contains(e.LastError, proxy.addr) {
		t.Fatalf("S3 down: %s; want RetryExceeded after 2 calls, last_error naming the endpoint", wstest.Describe(got))
	}
	assertNotArchived(t, st, storage, w.ID, metas)

	// 2. S3 answers but every upload is cut after 256 KiB.
	proxy.cut.Store(256 << 10)
	proxy.up(t)
	if _, err := st.Recover(ctx, w.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	wstest.WaitFor(t, 30*time.Second, "ERROR after cut uploads", func() (bool, string) {
		got, _ = st.Get(ctx, w.ID)
		return got.ObservedStatus == workspace.Error && got.ErrorInfo != nil, wstest.Describe(got)
	})
	if e := got.ErrorInfo; e.Reason != workspace.ReasonRetryExceeded || e.ErrorCount != 2 {
		t.Fatalf("cut uploads: %s; want RetryExceeded after 2 calls", wstest.Describe(got))
	}
	assertNotArchived(t, st, storage, w.ID, metas)

	// 3. S3 whole again: the archive is written, committed, recorded.
	proxy.cut.Store(0)
	if _, err := st.Recover(ctx, w.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	wstest.WaitFor(t, 30*time.Second, "archived", func() (bool, string) {
		got, _ = st.Get(ctx, w.ID)
		return got.ObservedStatus == workspace.Pending && got.Operation == workspace.OpNone, wstest.Describe(got)
	})
	if got.ArchiveKey == "" || got.ErrorInfo != nil || got.ErrorCount != 0 {
		t.Fatalf("after S3 came back: %s key=%q", wstest.Describe(got), got.ArchiveKey)
	}
	if m := metas(); len(m) != 1 || m[0] != provider.MetaKey(got.ArchiveKey) {
		t.Fatalf(".meta objects %v; want exactly the recorded archive's", m)
	}
	if ok, _ := storage.VolumeExists(ctx, w.ID); ok {
		t.Fatal("volume still there after a committed archive")
	}
}

// assertNotArchived: no archive_key, no .meta in the bucket, volume intact.
func assertNotArchived(t *testing.T, st *store.Store, s *archive.Storage, id string, metas func() []string) {
	t.Helper()
	w, err := st.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if w.ArchiveKey != "" {
		t.Fatalf("archive_key %q recorded for an archive that was never written whole", w.ArchiveKey)
	}
	if m := metas(); len(m) != 0 {
		t.Fatalf(".meta committed for an archive that was never written whole: %v", m)
	}
	if b, err := os.ReadFile(filepath.Join(s.VolumePath(id), "data.bin")); err != nil || len(b) != 3<<20 {
		t.Fatalf("volume damaged: %d bytes, %v", len(b), err)
	}
}
