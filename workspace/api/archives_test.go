package api_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/fs"
	"github.com/gantryhq/gantry/workspace/provider/s3"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// Snapshots, through `gantry ws` on a server with fs archives and on one
// with S3: every archive is kept until the GC keeps the newest N (and the
// chosen one); a chosen older archive is restored; a tampered archive is
// refused; a deleted workspace's archives go after the retention, and so
// do orphan blobs.
func TestSnapshotsThroughCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	for _, backend := range []string{"fs", "s3"} {
		t.Run(backend, func(t *testing.T) {
			data := t.TempDir()
			args := []string{"--keep-archives", "2", "--archive-retention", "3s", "--archive-gc-interval", "200ms"}
			blobs := provider.BlobStore(&fs.BlobStore{Dir: filepath.Join(data, "blobs")})
			if backend == "s3" {
				var url string
				blobs, url = testBucket(t)
				args = append(args, "--storage", url)
			}
			s := wstest.StartServe(t, "", data, args...)
			snapshotStory(t, s, blobs)
		})
	}
}

// testBucket makes an S3 bucket on the test MinIO for one test and returns
// a BlobStore on it and its --storage URL (the credentials in the env).
func testBucket(t *testing.T) (provider.BlobStore, string) {
	ep := os.Getenv("GANTRY_TEST_S3")
	if ep == "" {
		ep = "127.0.0.1:9000"
	}
	testutil.Ensure(t, "minio", ep)
	t.Setenv("AWS_ACCESS_KEY_ID", "gantry")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "gantry-secret")
	b := make([]byte, 5)
	rand.Read(b)
	bucket := "gantry-snap-" + hex.EncodeToString(b)
	bs, err := s3.New(t.Context(), s3.Config{Endpoint: ep, Bucket: bucket, AccessKey: "gantry", SecretKey: "gantry-secret", CreateBucket: true,
		Transport: &http.Transport{DisableKeepAlives: true}}) // no idle connection outlives the test
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		if list, err := bs.List(ctx, ""); err == nil {
			for _, o := range list {
				bs.Delete(ctx, o.Key)
			}
		}
		if mc, err := minio.New(ep, &minio.Options{Creds: credentials.NewStaticV4("gantry", "gantry-secret", ""), BucketLookup: minio.BucketLookupPath,
			Transport: &http.Transport{DisableKeepAlives: true}}); err == nil {
			mc.RemoveBucket(ctx, bucket)
		}
	})
	return bs, "s3://" + bucket + "?endpoint=http://" + ep
}

func snapshotStory(t *testing.T, s *wstest.Serve, blobs provider.BlobStore) {
	ctx := t.Context()
	keep := strings.TrimSpace(s.CLI("create", "keeper")) // the database is never empty (see ArchiveGC)
	id := strings.TrimSpace(s.CLI("create", "snap"))
	s.CLI("wait", id, "STANDBY", "--timeout", "30s")
	vol := filepath.Join(s.Data, "volumes", id)
	archives := func() []provider.ArchiveInfo {
		t.Helper()
		var list []provider.ArchiveInfo
		if err := json.Unmarshal([]byte(s.CLI("archives", id, "--json")), &list); err != nil {
			t.Fatal(err)
		}
		return list
	}
	// Four archives of four versions of the volume.
	var keys []string
	for v := 1; v <= 4; v++ {
		if v > 1 {
			s.CLI("down", id)
			s.CLI("wait", id, "STANDBY", "--timeout", "30s")
		}
		os.WriteFile(filepath.Join(vol, "version.txt"), []byte{byte('0' + v)}, 0o644)
		s.CLI("archive", id)
		s.CLI("wait", id, "PENDING", "--timeout", "30s")
		keys = append(keys, s.Get(id).ArchiveKey)
	}
	// The GC keeps the newest two; the newest is the current one.
	var list []provider.ArchiveInfo
	wstest.WaitFor(t, 10*time.Second, "the GC keeps two archives", func() (bool, string) {
		list = archives()
		return len(list) == 2, s.CLI("archives", id)
	})
	if list[0].Key != keys[3] || !list[0].Current || list[1].Key != keys[2] || list[1].Current || len(list[0].SHA256) != 64 || list[0].Size == 0 {
		t.Fatalf("after the GC: %+v; want %s (current) and %s", list, keys[3], keys[2])
	}
	if out := s.CLI("archives", id); !strings.Contains(out, "*  "+keys[3]) {
		t.Fatalf("ws archives does not mark the current archive:\n%s", out)
	}

	// Restoring a chosen archive: the older one comes back.
	if out, err := s.CLIErr("restore", id, "--archive", keys[0]); err == nil || !strings.Contains(out, "no committed archive") {
		t.Fatalf("restore from a collected archive: %v %s", err, out)
	}
	s.CLI("restore", id, "--archive", keys[2], "--up")
	s.CLI("wait", id, "RUNNING", "--timeout", "30s")
	if b, _ := os.ReadFile(filepath.Join(vol, "version.txt")); string(b) != "3" {
		t.Fatalf("restored from the chosen archive: version %q, want 3", b)
	}
	if out, err := s.CLIErr("restore", id, "--archive", keys[3]); err == nil || !strings.Contains(out, "archive it first") {
		t.Fatalf("restore over a live volume: %v %s", err, out)
	}

	// A tampered archive is refused: ERROR, no volume; another archive
	// then restores.
	s.CLI("archive", id)
	s.CLI("wait", id, "PENDING", "--timeout", "30s")
	bad := s.Get(id).ArchiveKey
	if err := blobs.Put(ctx, bad, strings.NewReader("not the archive that was written")); err != nil {
		t.Fatal(err)
	}
	s.CLI("down", id)
	s.CLI("wait", id, "ERROR", "--timeout", "30s")
	if w := s.Get(id); w.ErrorInfo == nil || w.ErrorInfo.Reason != "ChecksumMismatch" {
		t.Fatalf("restore of a tampered archive: %s", wstest.Describe(w))
	}
	if _, err := os.Stat(vol); !os.IsNotExist(err) {
		t.Fatalf("a tampered archive left a volume: %v", err)
	}
	// Choosing another archive is the way out: the error is cleared and
	// the restore runs again (desired is still STANDBY).
	s.CLI("restore", id, "--archive", keys[3])
	s.CLI("down", id)
	s.CLI("wait", id, "STANDBY", "--timeout", "30s")
	if b, _ := os.ReadFile(filepath.Join(vol, "version.txt")); string(b) != "4" {
		t.Fatalf("restored after the refusal: version %q, want 4", b)
	}

	// An orphan (an id the database does not know) and the deleted
	// workspace's archives go once the retention has passed, not before.
	orphan := "archives/" + uuid.NewString() + "/op/home.tar.zst"
	if err := blobs.Put(ctx, orphan, strings.NewReader("orphan")); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now() // the tombstone is written after this
	s.CLI("delete", id)
	s.CLI("wait", id, "DELETED", "--timeout", "30s")
	count := func(prefix string) int {
		l, err := blobs.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	if n := count("archives/" + id + "/"); n < 2 {
		t.Fatalf("right after the delete, %d blobs of the workspace are left; want its archives kept for the retention", n)
	}
	wstest.WaitFor(t, 15*time.Second, "the deleted workspace's and the orphan's blobs removed", func() (bool, string) {
		a, o := count("archives/"+id+"/"), count(orphan)
		return a == 0 && o == 0, strings.Repeat("·", a) + "|" + strings.Repeat("·", o)
	})
	// (S3 may keep object times to the second: allow for it.)
	if since := time.Since(deleted); since < 2*time.Second {
		t.Fatalf("removed %v after the delete, before the 3 s retention", since)
	}
	if w := s.Get(keep); w.ID != keep {
		t.Fatal("the other workspace is gone")
	}
}
