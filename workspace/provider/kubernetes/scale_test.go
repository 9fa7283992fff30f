package kubernetes

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/server"
)

// TestManyWorkspacesAcrossNodes converges N workspaces (GANTRY_KUBE_N, default 300) to
// RUNNING across 50 fake nodes of this test, each workspace requesting a share of a node
// so that the scheduler has to spread them, and reports the time from the first create to
// the last workspace RUNNING.
func TestManyWorkspacesAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: TestSchedulingIsReal covers scheduling; make test runs the 300")
	}
	n := 300
	if v := os.Getenv("GANTRY_KUBE_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("GANTRY_KUBE_N=%q: want a positive count", v)
		}
	}
	const nodes = 50
	c := newTestCluster(t)
	names := c.addNodes("scale", nodes, "32", "128Gi")
	cfg := c.config()
	cfg.NodeSelector = map[string]string{"gantry-test": c.ns} // this test's nodes only
	cfg.PollEvery = 0                                         // the default, as the figures in docs/BENCHMARKS.md had it
	p := c.provider(cfg)
	s := startServer(t, p, func(sc *server.ServerConfig) {
		sc.Reconciler.Interval = time.Hour // nothing waits for a tick
	})
	ctx := t.Context()

	// Each workspace asks for 1.5 CPUs: a 32-CPU node holds 21 of them, 50 nodes
	// 1050, so 1000 fill the nodes nearly up and the scheduler has to spread them.
	per := 1.5
	start := time.Now()
	for i := 0; i < n; i++ {
		_, err := s.Create(ctx, workspace.NewWorkspace{Name: fmt.Sprintf("ws-%d", i), Desired: workspace.Running, Spec: workspace.Spec{CPUs: per}})
		if err != nil {
			t.Fatal(err)
		}
	}
	created := time.Since(start)
	testutil.WaitFor(t, 10*time.Minute, fmt.Sprintf("%d workspaces RUNNING", n), func() (bool, string) {
		ws, err := s.List(ctx)
		if err != nil {
			return false, err.Error()
		}
		running, failed := 0, 0
		for _, w := range ws {
			if w.ObservedStatus == workspace.Running && w.Operation == workspace.OpNone {
				running++
			}
			if w.ObservedStatus == workspace.Error {
				failed++
			}
		}
		return running == n, fmt.Sprintf("%d of %d running, %d in ERROR", running, n, failed)
	})
	took := time.Since(start)
	t.Logf("%d workspaces RUNNING on %d fake nodes in %v (creates took %v): %.0f workspaces/s", n, nodes, took.Round(time.Millisecond), created.Round(time.Millisecond), float64(n)/took.Seconds())

	// Every pod is on a node, and no node holds more than its CPUs allow.
	mine := map[string]bool{}
	for _, name := range names {
		mine[name] = true
	}
	pods := c.pods(map[string]string{LabelRole: RoleWorkspace})
	perNode := map[string]int{}
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == "" {
			t.Fatalf("pod %s: phase %s node %q", pod.Name, pod.Status.Phase, pod.Spec.NodeName)
		}
		perNode[pod.Spec.NodeName]++
	}
	if len(pods) != n {
		t.Fatalf("%d workspace pods, want %d", len(pods), n)
	}
	for node, k := range perNode {
		if !mine[node] {
			t.Errorf("pod on node %s, not one of this test's (node selector)", node)
		}
		nd, err := c.cli.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if float64(k)*per > float64(nd.Status.Allocatable.Cpu().MilliValue())/1000 {
			t.Errorf("node %s holds %d pods of %.1f CPUs: more than its %v", node, k, per, nd.Status.Allocatable.Cpu())
		}
	}
	t.Logf("pods spread over %d of the %d nodes", len(perNode), nodes)
}
