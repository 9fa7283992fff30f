package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/server"
)

// apiServer is a second kube-apiserver of the test cluster: the same etcd (so the same
// objects, and the shared scheduler, controllers and kwok act on them), its own port, so
// that a test can kill and restart it without disturbing anyone else.
type apiServer struct {
	t    *testing.T
	argv []string
	cmd  *exec.Cmd
	log  *os.File
	rest *rest.Config
}

func startAPIServer(t *testing.T, base *rest.Config) *apiServer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(servicesDir(), "kubernetes", "apiserver.cmd"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var argv []string
	for _, a := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		switch {
		case strings.HasPrefix(a, "--secure-port="):
			a = fmt.Sprintf("--secure-port=%d", port)
		case strings.HasPrefix(a, "--cert-dir="):
			a = "--cert-dir=" + t.TempDir()
		}
		argv = append(argv, a)
	}
	rc := rest.CopyConfig(base)
	rc.Host = fmt.Sprintf("https://127.0.0.1:%d", port)
	a := &apiServer{t: t, argv: argv, rest: rc}
	lf, err := os.Create(filepath.Join(t.TempDir(), "kube-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	a.log = lf
	a.start()
	t.Cleanup(a.kill)
	return a
}

func (a *apiServer) start() {
	a.t.Helper()
	a.cmd = exec.Command(a.argv[0], a.argv[1:]...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	cli, err := kubernetes.NewForConfig(a.rest)
	if err != nil {
		a.t.Fatal(err)
	}
	testutil.WaitFor(a.t, time.Minute, "second API server ready (log "+a.log.Name()+")", func() (bool, string) {
		b, err := cli.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(a.t.Context())
		return err == nil, string(b) + fmt.Sprint(err)
	})
}

func (a *apiServer) kill() {
	if a.cmd != nil && a.cmd.Process != nil {
		a.cmd.Process.Kill()
		a.cmd.Wait()
		a.cmd = nil
	}
}

// TestAPIServerRestart kills the API server gantry talks to in the middle of bringing a
// workspace up, asks for another during the outage, and starts it again a few seconds
// later: the provider's calls fail as Unreachable and are retried, its watch resumes (a Pod deleted behind gantry's back
// afterwards is noticed and replaced), every workspace converges, and no workspace ever
// has two Pods.
func TestAPIServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts and kills its own API server; TestStartSeesThePodWhenTheWatchIsBehind covers the watch behind")
	}
	c := newTestCluster(t)
	api := startAPIServer(t, c.rest)
	cli, err := kubernetes.NewForConfig(api.rest)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.config()
	cfg.Client, cfg.REST = cli, api.rest
	// The provider's own word (pods made, the watch interrupted and resumed, the cache behind)
	// in the test's log: what a failure here needs to be read.
	cfg.Logger = slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := c.provider(cfg)
	rec := &recording{Provider: p}
	s := startServer(t, p, func(sc *server.ServerConfig) {
		sc.Container, sc.Storage = rec, rec
		// An outage of a few seconds must not exhaust the retries.
		sc.Reconciler.MaxRetries, sc.Reconciler.RetryBackoffMax = 30, time.Second
	})
	ctx := t.Context()

	first, err := s.Create(ctx, workspace.NewWorkspace{Name: "before", Desired: workspace.Running})
	if err != nil {
		t.Fatal(err)
	}
	s.waitState(t, first.ID, workspace.Running, time.Minute)

	// Mid-operation: a new workspace is being provisioned and started when the API
	// server dies.
	second, err := s.Create(ctx, workspace.NewWorkspace{Name: "during", Desired: workspace.Running})
	if err != nil {
		t.Fatal(err)
	}
	api.kill()
	down := time.Now()
	// And one asked for during the outage: its provisioning cannot reach the API server.
	// (The one above may be past its calls already, its Start waiting on the watch, which
	// fails nothing: under load the outage then hit no call at all.)
	third, err := s.Create(ctx, workspace.NewWorkspace{Name: "outage", Desired: workspace.Running})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "a provider call to fail as Unreachable during the outage", func() (bool, string) {
		return rec.unreachable.Load() > 0, "none yet"
	})
	time.Sleep(time.Until(down.Add(3 * time.Second))) // real time: the outage, at least 3 s
	api.start()
	t.Logf("API server down for %v", time.Since(down).Round(time.Millisecond))
	s.waitStatePods(t, c, second.ID, workspace.Running, 2*time.Minute)
	s.waitStatePods(t, c, third.ID, workspace.Running, 2*time.Minute)

	// The watch resumed: a Pod removed behind gantry's back (through the other API
	// server) is seen gone and started again.
	old, err := c.cli.CoreV1().Pods(c.ns).Get(ctx, PodName(first.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cli.CoreV1().Pods(c.ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, time.Minute, "deleted pod replaced", func() (bool, string) {
		pod, err := c.cli.CoreV1().Pods(c.ns).Get(ctx, PodName(first.ID), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pod.UID != old.UID && pod.DeletionTimestamp == nil, "same pod " + string(pod.UID)
	})
	s.waitStatePods(t, c, first.ID, workspace.Running, time.Minute)

	for _, id := range []string{first.ID, second.ID, third.ID} {
		if pods := c.pods(map[string]string{LabelWorkspaceID: id}); len(pods) != 1 {
			t.Errorf("workspace %s: %s; want exactly one pod", id, podSummary(pods))
		}
	}
}

// waitStatePods is waitState, saying at a timeout where the workspace's Pods are (conditions
// included): a start that never ends is then told apart from one the reconciler never made.
func (s *wsServer) waitStatePods(t *testing.T, c *testCluster, id string, st workspace.Status, d time.Duration) {
	t.Helper()
	testutil.WaitFor(t, d, fmt.Sprintf("workspace %s %s", id, st), func() (bool, string) {
		w, err := s.Get(t.Context(), id)
		if err != nil {
			return false, err.Error()
		}
		if w.ObservedStatus == st && w.Operation == workspace.OpNone && w.DesiredState == st {
			return true, ""
		}
		var b strings.Builder
		fmt.Fprintf(&b, "observed %s desired %s op %q error %+v;", w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorInfo)
		for _, p := range c.pods(map[string]string{LabelWorkspaceID: id}) {
			fmt.Fprintf(&b, " pod %s uid %s %s on %q deleting=%v conditions", p.Name, p.UID, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil)
			for _, cd := range p.Status.Conditions {
				fmt.Fprintf(&b, " %s=%s(%s %s)", cd.Type, cd.Status, cd.Reason, cd.Message)
			}
		}
		return false, b.String()
	})
}

// recording is the provider, counting the calls that failed as Unreachable.
type recording struct {
	*Provider
	unreachable atomic.Int32
}

func (r *recording) note(err error) error {
	if errors.Is(err, provider.ErrUnreachable) {
		r.unreachable.Add(1)
	}
	return err
}

func (r *recording) Provision(ctx context.Context, id string) error {
	return r.note(r.Provider.Provision(ctx, id))
}

func (r *recording) Start(ctx context.Context, spec provider.Spec) error {
	return r.note(r.Provider.Start(ctx, spec))
}

func (r *recording) Stop(ctx context.Context, id string) error {
	return r.note(r.Provider.Stop(ctx, id))
}
