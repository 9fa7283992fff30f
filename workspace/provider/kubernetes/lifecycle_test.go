package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/reconcile"
	"github.com/gantryhq/gantry/workspace/server"
	"github.com/gantryhq/gantry/workspace/singletons"
)

// wsServer is gantry's workspace server (API, reconciler, monitor) in this process, on
// SQLite, with the Kubernetes provider as its Container and Storage.
type wsServer struct {
	*client.Client
	srv *server.Server
}

// backend is a provider that is both the server's Container and its Storage.
type backend interface {
	provider.Container
	provider.Storage
}

func startServer(t testing.TB, p backend, mutate ...func(*server.ServerConfig)) *wsServer {
	t.Helper()
	data := t.TempDir()
	addr := make(chan string, 1)
	cfg := server.ServerConfig{Data: data, Listen: "127.0.0.1:0", Container: p, Storage: p, // mutate may wrap them
		Reconciler: reconcile.Config{Interval: 2 * time.Second, RetryBackoff: 200 * time.Millisecond, MaxRetries: 3},
		Monitor:    singletons.MonitorConfig{Interval: 2 * time.Second},
		Ready:      func(a string) { addr <- a },
		Logger:     slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	for _, m := range mutate {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	srv, err := server.NewServer(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var a string
	select {
	case a = <-addr:
	case err := <-done:
		t.Fatalf("server: %v", err)
	}
	token, err := os.ReadFile(filepath.Join(data, server.AdminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return &wsServer{Client: &client.Client{Base: "http://" + a, Token: strings.TrimSpace(string(token))}, srv: srv}
}

// tlog writes the server's warnings to the test's log.
type tlog struct{ t testing.TB }

func (l tlog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// waitState waits until workspace id is observed in st with nothing left to do.
func (s *wsServer) waitState(t *testing.T, id string, st workspace.Status, d time.Duration) workspace.Workspace {
	t.Helper()
	var w workspace.Workspace
	testutil.WaitFor(t, d, fmt.Sprintf("workspace %s %s", id, st), func() (bool, string) {
		var err error
		w, err = s.Get(t.Context(), id)
		if err != nil {
			return false, err.Error()
		}
		return w.ObservedStatus == st && w.Operation == workspace.OpNone && w.DesiredState == st, fmt.Sprintf("observed %s desired %s op %q error %+v", w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorInfo)
	})
	return w
}

// TestLifecycleThroughTheReconciler drives one workspace through create → up → down →
// archive → up → delete with gantry's server and the real API server, and looks at what
// each step left in the cluster: the workspace Pod, its claim, the archive and restore
// Pods; the files written to the volume come back after the archive.
func TestLifecycleThroughTheReconciler(t *testing.T) {
	c := newTestCluster(t)
	p := c.provider(c.config())
	s := startServer(t, p)
	ctx := t.Context()

	w, err := s.Create(ctx, workspace.NewWorkspace{Name: "lifecycle", Desired: workspace.Running, Command: "sleep infinity",
		Spec: workspace.Spec{CPUs: 0.5, Memory: 256 << 20, Env: []string{"EDITOR=vi"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := w.ID
	s.waitState(t, id, workspace.Running, time.Minute)

	pods := c.pods(map[string]string{LabelWorkspaceID: id, LabelRole: RoleWorkspace})
	if len(pods) != 1 || pods[0].Name != PodName(id) || pods[0].Status.Phase != corev1.PodRunning || pods[0].Spec.NodeName == "" {
		t.Fatalf("want one running, scheduled workspace pod; got %s", podSummary(pods))
	}
	pod := pods[0]
	ctr := pod.Spec.Containers[0]
	if got := ctr.Resources.Limits.Cpu().MilliValue(); got != 500 || ctr.Resources.Requests.Memory().Value() != 256<<20 {
		t.Errorf("pod resources %v, want cpu 500m and memory 256Mi as requests and limits", ctr.Resources)
	}
	if !hasEnv(ctr.Env, "EDITOR", "vi") || !hasEnv(ctr.Env, "PORT", "8080") || strings.Join(ctr.Command, " ") != "sh -c sleep infinity" {
		t.Errorf("pod command %q env %v: want the spec's command, its env and PORT", ctr.Command, ctr.Env)
	}
	pvc, err := c.cli.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, ClaimName(id), metav1.GetOptions{})
	if err != nil || pvc.Status.Phase != corev1.ClaimBound || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Fatalf("claim %s: %v (phase %v); want it bound and mounted by the pod", ClaimName(id), err, pvc.Status.Phase)
	}
	// What the workspace wrote (the simulated kubelet keeps the claim's bytes here).
	home := filepath.Join(c.claimDir(id), "home")
	writeTree(t, home, map[string]string{"notes.txt": "hello from the workspace\n", "src/main.go": "package main\n"})

	// down: the Pod goes, the claim stays.
	if _, err := s.SetDesired(ctx, id, workspace.Standby); err != nil {
		t.Fatal(err)
	}
	s.waitState(t, id, workspace.Standby, time.Minute)
	testutil.WaitFor(t, 30*time.Second, "workspace pod gone", func() (bool, string) {
		pods := c.pods(map[string]string{LabelWorkspaceID: id, LabelRole: RoleWorkspace})
		return len(pods) == 0, podSummary(pods)
	})
	if _, err := c.cli.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, ClaimName(id), metav1.GetOptions{}); err != nil {
		t.Fatalf("claim after down: %v; want it kept", err)
	}

	// archive: an archive Pod packs the claim into the archive storage, then the claim goes.
	if _, err := s.SetDesired(ctx, id, workspace.Pending); err != nil {
		t.Fatal(err)
	}
	w = s.waitState(t, id, workspace.Pending, time.Minute)
	if ok, err := archive.Committed(ctx, p.cfg.Archives, w.ArchiveKey); err != nil || !ok {
		t.Fatalf("archive %q committed: %v %v", w.ArchiveKey, ok, err)
	}
	testutil.WaitFor(t, 30*time.Second, "claim gone after archive", func() (bool, string) {
		_, err := c.cli.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, ClaimName(id), metav1.GetOptions{})
		return isNotFound(err), fmt.Sprint(err)
	})

	// up: a restore Pod fills a new claim from the archive, then the workspace Pod runs.
	if _, err := s.SetDesired(ctx, id, workspace.Running); err != nil {
		t.Fatal(err)
	}
	s.waitState(t, id, workspace.Running, time.Minute)
	if got := readTree(t, filepath.Join(c.claimDir(id), "home")); got["notes.txt"] != "hello from the workspace\n" || got["src/main.go"] != "package main\n" {
		t.Fatalf("restored volume holds %v; want the files written before the archive", got)
	}
	jobs := c.sim.jobPods()
	if len(jobs) != 2 || !strings.Contains(jobs[0], "-"+RoleArchive+"-") || !strings.Contains(jobs[1], "-"+RoleRestore+"-") {
		t.Fatalf("job pods run: %v; want one archive pod, then one restore pod", jobs)
	}
	if left := c.pods(map[string]string{LabelWorkspaceID: id, LabelRole: RoleArchive}); len(left) != 0 {
		t.Errorf("archive pods left after success: %s", podSummary(left))
	}

	// delete: the Pod and the claim go.
	if _, err := s.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, time.Minute, "pod and claim gone after delete", func() (bool, string) {
		pods := c.pods(map[string]string{LabelWorkspaceID: id})
		_, err := c.cli.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, ClaimName(id), metav1.GetOptions{})
		return len(pods) == 0 && isNotFound(err), podSummary(pods) + " claim: " + fmt.Sprint(err)
	})
}

func hasEnv(env []corev1.EnvVar, k, v string) bool {
	for _, e := range env {
		if e.Name == k && e.Value == v {
			return true
		}
	}
	return false
}

func podSummary(pods []corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d pods:", len(pods))
	for _, p := range pods {
		fmt.Fprintf(&b, " %s(%s on %q, deleting=%v)", p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil)
	}
	return b.String()
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return got
}
