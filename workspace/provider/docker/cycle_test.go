package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/providertest"
	"github.com/gantryhq/gantry/workspace/provider/s3"
)

func TestContainerConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: TestStartStopObserve and TestStartReportsExit cover the engine; make test runs the conformance suite")
	}
	p, _ := newTestProvider(t, Config{NetworkMode: "none"})
	id := "t" + randID(t)
	cleanupWorkspace(t, p, id)
	providertest.Container(t, p, provider.Spec{ID: id, VolumeDir: t.TempDir()})
}

// s3Endpoint is the loopback S3 server (GANTRY_TEST_S3, default
// 127.0.0.1:9000), started by scripts/services.d/minio.sh when down.
func s3Endpoint(t *testing.T) string {
	ep := os.Getenv("GANTRY_TEST_S3")
	if ep == "" {
		ep = "127.0.0.1:9000"
	}
	live := func() bool {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + ep + "/minio/health/live")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	if !live() {
		root, _ := os.Getwd()
		for _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil; _, err = os.Stat(filepath.Join(root, "go.mod")) {
			root = filepath.Dir(root)
		}
		cmd := exec.Command("bash", filepath.Join(root, "scripts/services.d/minio.sh"))
		cmd.Env = append(os.Environ(), "GANTRY_MINIO_ADDR="+ep)
		if out, err := cmd.CombinedOutput(); err != nil || !live() {
			t.Fatalf("S3 server %s down and could not be started: %v\n%s", ep, err, out)
		}
	}
	return ep
}

// The whole cycle on the real backends: create → up (a Docker container
// writes into its volume) → stop → archive to S3 → volume gone → restore
// from S3 → up again → the files are identical.
func TestFullCycleDockerS3(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the whole cycle on Docker and S3 is left to make test")
	}
	ctx := t.Context()
	p, _ := newTestProvider(t, Config{NetworkMode: "none"})
	b := make([]byte, 5)
	rand.Read(b)
	bucket := "gantry-cycle-" + hex.EncodeToString(b)
	blobs, err := s3.New(ctx, s3.Config{Endpoint: s3Endpoint(t), Bucket: bucket, AccessKey: "gantry", SecretKey: "gantry-secret", CreateBucket: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	st := &archive.Storage{Root: t.TempDir(), Blobs: blobs}
	id := "c" + randID(t)
	cleanupWorkspace(t, p, id)
	key := provider.ArchiveKey(id, "op-archive-1")
	t.Cleanup(func() {
		blobs.Delete(context.WithoutCancel(t.Context()), provider.MetaKey(key))
		blobs.Delete(context.WithoutCancel(t.Context()), key)
	})

	if err := st.Provision(ctx, id); err != nil {
		t.Fatal(err)
	}
	vol := st.VolumePath(id)
	spec := provider.Spec{ID: id, VolumeDir: vol}
	if err := p.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// User files beside what the container wrote.
	os.MkdirAll(filepath.Join(vol, "proj/src"), 0o755)
	os.WriteFile(filepath.Join(vol, "proj/src/main.go"), []byte("package main\n"), 0o644)
	big := make([]byte, 2<<20)
	rand.Read(big)
	os.WriteFile(filepath.Join(vol, "proj/data.bin"), big, 0o600)
	before := readTree(t, vol)
	if _, ok := before["started-by-"+id]; !ok {
		t.Fatalf("the container did not write into its volume: %v", keys(before))
	}

	if err := p.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Archive(ctx, id, "op-archive-1"); err != nil || got != key {
		t.Fatalf("Archive = %q, %v", got, err)
	}
	if ok, err := archive.Committed(ctx, blobs, key); !ok || err != nil {
		t.Fatalf("archive not committed in S3: %v %v", ok, err)
	}
	if err := st.DeleteVolume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := st.Restore(ctx, id, key); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, readTree(t, vol)); d != "" {
		t.Fatalf("files after archive → restore differ (-before +after):\n%s", d)
	}
	if err := p.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// The container rewrites its own start marker on every start; the
	// user's files must come through the second up untouched.
	after := readTree(t, vol)
	delete(before, "started-by-"+id)
	delete(after, "started-by-"+id)
	if d := cmp.Diff(before, after); d != "" {
		t.Fatalf("files after the second up differ (-before +after):\n%s", d)
	}
}

func readTree(t *testing.T, root string) map[string]string {
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(root, p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
