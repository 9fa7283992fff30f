package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/minio/minio-go/v7"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/fs"
	"github.com/gantryhq/gantry/workspace/provider/providertest"
)

func testEndpoint(t *testing.T) string { return testutil.S3Endpoint(t) }

// newTestStore makes a fresh bucket on the test server and removes exactly
// it (and its objects) when the test ends.
func newTestStore(t *testing.T, cfg Config) *BlobStore {
	t.Helper()
	cfg.Endpoint = testEndpoint(t)
	if cfg.AccessKey == "" {
		cfg.AccessKey, cfg.SecretKey = testutil.S3AccessKey, testutil.S3SecretKey
	}
	b := make([]byte, 5)
	rand.Read(b)
	cfg.Bucket = "gantry-test-" + hex.EncodeToString(b)
	cfg.CreateBucket = true
	bs, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		for o := range bs.cli.ListObjects(ctx, cfg.Bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err == nil {
				bs.cli.RemoveObject(ctx, cfg.Bucket, o.Key, minio.RemoveObjectOptions{})
			}
		}
		for u := range bs.cli.ListIncompleteUploads(ctx, cfg.Bucket, "", true) {
			bs.cli.RemoveIncompleteUpload(ctx, cfg.Bucket, u.Key)
		}
		bs.cli.RemoveBucket(ctx, cfg.Bucket)
		bs.Close()
	})
	return bs
}

// stores is the one provider test matrix: every test below runs on the fs
// BlobStore and on S3, so both keep the same promises.
func stores(t *testing.T) map[string]func(t *testing.T) provider.BlobStore {
	return map[string]func(t *testing.T) provider.BlobStore{
		"fs": func(t *testing.T) provider.BlobStore { return &fs.BlobStore{Dir: t.TempDir()} },
		"s3": func(t *testing.T) provider.BlobStore { return newTestStore(t, Config{Prefix: "pre/fix"}) },
	}
}

func TestBlobStoreConformance(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) { providertest.BlobStore(t, mk(t)) })
	}
}

func TestArchiveRoundTrip(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			root := t.TempDir()
			s := &archive.Storage{Root: filepath.Join(root, "volumes"), Blobs: mk(t)}
			if err := s.Provision(ctx, "ws1"); err != nil {
				t.Fatal(err)
			}
			vol := s.VolumePath("ws1")
			files := map[string]string{"a.txt": "alpha", "src/deep/main.go": "package main\n", "big.bin": strings.Repeat("z", 3<<20)}
			for p, c := range files {
				os.MkdirAll(filepath.Dir(filepath.Join(vol, p)), 0o755)
				os.WriteFile(filepath.Join(vol, p), []byte(c), 0o644)
			}
			key, err := s.Archive(ctx, "ws1", "op-1")
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := archive.Committed(ctx, s.Blobs, key); err != nil || !ok {
				t.Fatalf("Committed = %v, %v", ok, err)
			}
			if err := s.DeleteVolume(ctx, "ws1"); err != nil {
				t.Fatal(err)
			}
			if err := s.Restore(ctx, "ws1", key); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for p := range files {
				b, err := os.ReadFile(filepath.Join(vol, p))
				if err != nil {
					t.Fatal(err)
				}
				got[p] = string(b)
			}
			if d := cmp.Diff(files, got); d != "" {
				t.Fatalf("restored files differ (-want +got):\n%s", d)
			}
		})
	}
}

// failAfter yields n random bytes, then an error: a tar stream cut short.
type failAfter struct{ n int }

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("source died")
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	rand.Read(p)
	f.n -= len(p)
	return len(p), nil
}

// A multipart upload whose source fails after several parts were sent is
// aborted: no object, no incomplete upload left, no .meta.
func TestTruncatedMultipartNeverCommitted(t *testing.T) {
	bs := newTestStore(t, Config{PartSize: 5 << 20})
	ctx := t.Context()
	key := provider.ArchiveKey("ws1", "op-9")
	err := bs.Put(ctx, key, &failAfter{n: 12 << 20})
	if err == nil || !strings.Contains(err.Error(), "source died") {
		t.Fatalf("Put of a failing 12 MiB stream = %v; want the source error", err)
	}
	if _, ok, err := bs.Stat(ctx, key); ok || err != nil {
		t.Fatalf("Stat after a failed multipart Put = %v, %v; want absent", ok, err)
	}
	if ok, _ := archive.Committed(ctx, bs, key); ok {
		t.Fatal("a truncated archive counts as committed")
	}
	for u := range bs.cli.ListIncompleteUploads(ctx, bs.cfg.Bucket, "", true) {
		t.Errorf("incomplete upload left behind: %s (%v)", u.Key, u.Err)
	}
	// And a large, complete stream does go up in parts.
	data := make([]byte, 11<<20)
	rand.Read(data)
	if err := bs.Put(ctx, key, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	info, err := bs.cli.StatObject(ctx, bs.cfg.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(info.ETag, "-3") {
		t.Errorf("ETag %q: want a 3-part multipart upload", info.ETag)
	}
	rc, err := bs.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("multipart blob read back differs")
	}
}

// With the server unreachable, Put/Get/Stat fail naming the endpoint, and
// an archive attempt leaves nothing committed (checked after the fact on
// the real server under the same key).
func TestUnreachable(t *testing.T) {
	down, err := New(t.Context(), Config{Endpoint: "127.0.0.1:1", Bucket: "bucket", Prefix: "team/x", AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644)
	key := provider.ArchiveKey("ws1", "op-1")
	_, err = archive.Write(ctx, down, key, dir)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("archive.Write to a dead endpoint = %v; want ErrUnreachable naming it", err)
	}
	// The error names the object as the user's URL does: with its prefix.
	if _, _, err := down.Stat(ctx, key); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "s3://bucket/team/x/"+key+" ") {
		t.Fatalf("Stat = %v; want ErrUnreachable naming s3://bucket/team/x/%s", err, key)
	}
	if _, err := down.Get(ctx, key); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Get = %v; want ErrUnreachable", err)
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Config
		wantErr string
	}{
		{in: "s3://archives?endpoint=http://127.0.0.1:9000", want: Config{Bucket: "archives", Endpoint: "127.0.0.1:9000"}},
		{in: "s3://b/some/prefix/?endpoint=https://s3.example:443&region=eu-west-1&create=true&part_size=8388608",
			want: Config{Bucket: "b", Prefix: "some/prefix", Endpoint: "s3.example:443", Secure: true, Region: "eu-west-1", CreateBucket: true, PartSize: 8 << 20}},
		{in: "file:///x", wantErr: "scheme"},
		{in: "s3://?endpoint=http://h:1", wantErr: "no bucket"},
		{in: "s3://b", wantErr: "endpoint= is required"},
		{in: "s3://b?endpoint=h:1", wantErr: "want http://host:port"},
		{in: "s3://k:s@b?endpoint=http://h:1", wantErr: "credentials"},
		{in: "s3://b?endpoint=http://h:1&create=maybe", wantErr: "create="},
		{in: "s3://b?endpoint=http://h:1&bogus=1", wantErr: "unknown parameter"},
	} {
		got, err := ParseURL(tc.in)
		if tc.wantErr != "" {
			if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseURL(%q) err = %v; want ErrBadURL mentioning %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.in, err)
			continue
		}
		if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(Config{})); d != "" {
			t.Errorf("ParseURL(%q) (-want +got):\n%s", tc.in, d)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	f.Add("s3://b/p?endpoint=http://127.0.0.1:9000&region=r")
	f.Add("s3://b?endpoint=https://h&part_size=99")
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := ParseURL(s)
		if err != nil {
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("error %v does not wrap ErrBadURL", err)
			}
			return
		}
		if cfg.Bucket == "" || cfg.Endpoint == "" || strings.Contains(cfg.Endpoint, "/") {
			t.Fatalf("accepted %q as %+v", s, cfg)
		}
	})
}

func TestBadKeys(t *testing.T) {
	bs, err := New(t.Context(), Config{Endpoint: "127.0.0.1:1", Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"", "/abs", "a/../b", "a\\b", "a//b"} {
		if err := bs.Put(t.Context(), k, strings.NewReader("x")); !errors.Is(err, ErrBadKey) {
			t.Errorf("Put(%q) = %v; want ErrBadKey", k, err)
		}
	}
}

// TestRangesAndCheck: GetRange reads the bytes asked for (fewer at the
// end); Check tells a missing bucket and refused credentials apart.
func TestRangesAndCheck(t *testing.T) {
	ctx := t.Context()
	bs := newTestStore(t, Config{Prefix: "p"})
	data := bytes.Repeat([]byte("0123456789"), 700000) // 7 MB: past one part
	if err := bs.Put(ctx, "a", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int64{{0, 10}, {5, 3}, {6999990, 100}, {123456, 1 << 20}} {
		rc, err := bs.GetRange(ctx, "a", r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		want := data[r[0]:min(int64(len(data)), r[0]+r[1])]
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("GetRange(%d, %d): %d bytes, %v; want %d", r[0], r[1], len(got), err, len(want))
		}
	}
	if err := bs.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	cfg := bs.cfg
	cfg.Bucket += "-missing"
	cfg.CreateBucket = false
	other, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Check(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Check of a missing bucket: %v", err)
	}
	cfg = bs.cfg
	cfg.SecretKey, cfg.CreateBucket = "wrong", false
	other2, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other2.Close()
	if err := other2.Check(ctx); err == nil || !strings.Contains(err.Error(), "refused the credentials") {
		t.Fatalf("Check with a wrong secret: %v", err)
	}
}

// Transient says yes to what a second try may pass (a cut body, a reset
// connection, a busy or failing store) and no to what it cannot (a missing
// key, a refused credential, a bad range, a cancelled call), wrapped or
// not.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a body cut short", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"a reset connection", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"unreachable", fmt.Errorf("%w: get", ErrUnreachable), true},
		{"503", minio.ErrorResponse{StatusCode: 503, Code: "ServiceUnavailable"}, true},
		{"SlowDown", fmt.Errorf("get: %w", minio.ErrorResponse{StatusCode: 503, Code: "SlowDown"}), true},
		{"429", minio.ErrorResponse{StatusCode: 429}, true},
		{"AccessDenied", minio.ErrorResponse{StatusCode: 403, Code: "AccessDenied"}, false},
		{"InvalidRange", minio.ErrorResponse{StatusCode: 416, Code: "InvalidRange"}, false},
		{"NoSuchBucket", minio.ErrorResponse{StatusCode: 404, Code: "NoSuchBucket"}, false},
		{"not found", fmt.Errorf("%w: s3://b/k", provider.ErrNotFound), false},
		{"cancelled", fmt.Errorf("get: %w", context.Canceled), false},
		{"deadline", context.DeadlineExceeded, false},
		{"a full local disk", fmt.Errorf("stage: %w", &os.PathError{Op: "write", Path: "/tmp/x", Err: syscall.ENOSPC}), false},
		{"a bad certificate", &url.Error{Op: "Get", URL: "https://s3", Err: errors.New("x509: certificate signed by unknown authority")}, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// GetRangeOf reads the version List reported: with its ETag it reads as
// GetRange; once the key was written again, it fails with ErrChanged (not
// Transient: a second try cannot pass), so a read resumed later is never
// stitched from two versions.
func TestGetRangeOfPinsTheVersion(t *testing.T) {
	ctx := t.Context()
	bs := newTestStore(t, Config{})
	if err := bs.Put(ctx, "k", strings.NewReader("version one")); err != nil {
		t.Fatal(err)
	}
	blobs, err := bs.List(ctx, "")
	if err != nil || len(blobs) != 1 || blobs[0].ETag == "" {
		t.Fatalf("List: %+v, %v; want k with its ETag", blobs, err)
	}
	read := func() (string, error) {
		rc, err := bs.GetRangeOf(ctx, "k", blobs[0].ETag, 8, 3)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		return string(b), err
	}
	if got, err := read(); got != "one" || err != nil {
		t.Fatalf("GetRangeOf the listed version: %q, %v; want \"one\"", got, err)
	}
	if err := bs.Put(ctx, "k", strings.NewReader("version two")); err != nil {
		t.Fatal(err)
	}
	if got, err := read(); !errors.Is(err, ErrChanged) || Transient(err) {
		t.Fatalf("GetRangeOf after a rewrite: %q, %v; want ErrChanged, not transient", got, err)
	}
}
