package kubernetes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/docker"
	"github.com/gantryhq/gantry/workspace/provider/fs"
	"github.com/gantryhq/gantry/workspace/provider/process"
	"github.com/gantryhq/gantry/workspace/server"
)

// BenchmarkManyWorkspaces converges N workspaces (GANTRY_WS_PROVIDER_N, default 1000) to
// RUNNING through gantry's server on each provider, from the first create to the last
// RUNNING, and then deletes them:
//
//	process     a `sleep` process per workspace, volumes as directories
//	docker      a container per workspace (gantry-ws-demo:latest, built by
//	            scripts/ws-demo-image.sh if missing), on the local engine
//	kubernetes  a Pod and a claim per workspace on the test cluster, 50 kwok nodes
//
// go test -run '^$' -bench ManyWorkspaces -benchtime 1x ./workspace/provider/kubernetes/
func BenchmarkManyWorkspaces(b *testing.B) {
	n := 1000
	if v := os.Getenv("GANTRY_WS_PROVIDER_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("GANTRY_WS_PROVIDER_N=%q: want a positive count", v)
		}
	}
	b.Run("process", func(b *testing.B) {
		dir := b.TempDir()
		be := struct {
			*process.Container
			*archive.Storage
		}{&process.Container{RunDir: filepath.Join(dir, "run")}, &archive.Storage{Root: filepath.Join(dir, "volumes"), Blobs: &fs.BlobStore{Dir: filepath.Join(dir, "blobs")}}}
		benchConverge(b, be, n, "sleep 3600")
	})
	b.Run("docker", func(b *testing.B) {
		const image = "gantry-ws-demo:latest"
		if exec.Command("docker", "image", "inspect", image).Run() != nil {
			if out, err := exec.Command("bash", filepath.Join(testutil.RepoRoot(b), "scripts", "ws-demo-image.sh")).CombinedOutput(); err != nil {
				b.Fatalf("scripts/ws-demo-image.sh: %v\n%s", err, out)
			}
		}
		c, err := docker.New(docker.Config{Image: image, NetworkMode: "none"})
		if err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		benchConverge(b, dockerBackend{c, &archive.Storage{Root: filepath.Join(dir, "volumes"), Blobs: &fs.BlobStore{Dir: filepath.Join(dir, "blobs")}}}, n, "")
	})
	b.Run("kubernetes", func(b *testing.B) {
		c := newTestCluster(b)
		c.addNodes("bench", 50, "32", "128Gi")
		cfg := c.config()
		cfg.NodeSelector = map[string]string{"gantry-test": c.ns}
		benchConverge(b, c.provider(cfg), n, "sleep 3600")
	})
}

// benchConverge creates n workspaces with desired RUNNING and waits until all run; it
// reports the time and workspaces/s, then deletes them all.
func benchConverge(b *testing.B, be backend, n int, command string) {
	s := startServer(b, be, func(sc *server.ServerConfig) {
		sc.Reconciler.Interval = time.Hour // nothing waits for a tick
		sc.Logger = nil
	})
	ctx := b.Context()
	ids := make([]string, 0, n)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < n; i++ {
		w, err := s.Create(ctx, workspace.NewWorkspace{Name: fmt.Sprintf("ws-%d", i), Desired: workspace.Running, Command: command})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, w.ID)
	}
	waitAll(b, s, n, func(w workspace.Workspace) bool {
		return w.ObservedStatus == workspace.Running && w.Operation == workspace.OpNone
	})
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(took.Seconds(), "s/converge")
	b.ReportMetric(float64(n)/took.Seconds(), "workspaces/s")
	for _, id := range ids {
		if _, err := s.Delete(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	waitAll(b, s, 0, func(w workspace.Workspace) bool { return w.ObservedStatus != workspace.Deleted })
}

// waitAll waits until exactly want workspaces satisfy ok (deleted ones are not listed).
func waitAll(b *testing.B, s *wsServer, want int, ok func(workspace.Workspace) bool) {
	testutil.WaitFor(b, 30*time.Minute, fmt.Sprintf("%d workspaces", want), func() (bool, string) {
		ws, err := s.List(b.Context())
		if err != nil {
			return false, err.Error()
		}
		k := 0
		for _, w := range ws {
			if ok(w) {
				k++
			}
		}
		return k == want, fmt.Sprintf("%d of %d (%d listed)", k, want, len(ws))
	})
}

// dockerBackend: the docker Container over directory volumes (bind mounts), as `ws serve
// --provider docker` runs it; the Storage's volume methods win over the Container's.
type dockerBackend struct {
	*docker.Provider
	*archive.Storage
}

func (d dockerBackend) VolumeExists(ctx context.Context, id string) (bool, error) {
	return d.Storage.VolumeExists(ctx, id)
}

func (d dockerBackend) DeleteVolume(ctx context.Context, id string) error {
	return d.Storage.DeleteVolume(ctx, id)
}
