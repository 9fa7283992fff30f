package kubernetes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider"
)

// TestSchedulingIsReal: the real scheduler places workspace Pods by their requests. One
// that fits no node stays Pending and the workspace shows the scheduler's reason
// (Unschedulable, "Insufficient cpu"); two that each fill most of a node land on two
// different nodes with room.
func TestSchedulingIsReal(t *testing.T) {
	c := newTestCluster(t)
	// Nodes of this test: 6 CPUs each. Other nodes may exist (the script's, other
	// tests'); none has 500 CPUs.
	c.addNodes("sched", 2, "6", "16Gi")
	p := c.provider(c.config())
	s := startServer(t, p)
	ctx := t.Context()

	huge, err := s.Create(ctx, workspace.NewWorkspace{Name: "huge", Desired: workspace.Running, Spec: workspace.Spec{CPUs: 500}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, time.Minute, "huge workspace shows Unschedulable", func() (bool, string) {
		w, err := s.Get(ctx, huge.ID)
		if err != nil {
			return false, err.Error()
		}
		if w.ErrorInfo == nil {
			return false, "no error info yet; observed " + string(w.ObservedStatus)
		}
		return w.ErrorInfo.Reason == ReasonUnschedulable && strings.Contains(w.ErrorInfo.LastError, "Insufficient cpu"),
			w.ErrorInfo.Reason + ": " + w.ErrorInfo.LastError
	})
	pod, err := c.cli.CoreV1().Pods(c.ns).Get(ctx, PodName(huge.ID), metav1.GetOptions{})
	if err != nil || pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending {
		t.Fatalf("huge pod: %v node %q phase %v; want it pending, on no node", err, pod.Spec.NodeName, pod.Status.Phase)
	}

	// Two workspaces of 5 CPUs: one per 6-CPU node, whichever nodes have room.
	var ids []string
	for _, name := range []string{"fits-a", "fits-b"} {
		w, err := s.Create(ctx, workspace.NewWorkspace{Name: name, Desired: workspace.Running, Spec: workspace.Spec{CPUs: 5}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, w.ID)
	}
	nodes := map[string]bool{}
	for _, id := range ids {
		s.waitState(t, id, workspace.Running, time.Minute)
		pod, err := c.cli.CoreV1().Pods(c.ns).Get(ctx, PodName(id), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node, err := c.cli.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s on node %q: %v", pod.Name, pod.Spec.NodeName, err)
		}
		if node.Status.Allocatable.Cpu().MilliValue() < 5000 {
			t.Errorf("pod %s landed on %s with %v CPUs allocatable; want a node with room for 5", pod.Name, node.Name, node.Status.Allocatable.Cpu())
		}
		nodes[node.Name] = true
	}
	if len(nodes) != 2 {
		t.Errorf("the two 5-CPU pods share a node (%v); a node has room for one", nodes)
	}
}

// TestStartReportsUnschedulable: the provider's Start names the reason a Pod cannot run
// (a provider.ReasonError), and leaves the Pod for the scheduler to retry.
func TestStartReportsUnschedulable(t *testing.T) {
	c := newTestCluster(t)
	p := c.provider(c.config())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := p.Provision(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	err := p.Start(ctx, provider.Spec{ID: "big", Limits: provider.Limits{Memory: 1 << 50}})
	var re *provider.ReasonError
	if !errors.As(err, &re) || re.Reason != ReasonUnschedulable || !strings.Contains(err.Error(), "Insufficient memory") {
		t.Fatalf("Start of a 1 PiB workspace: %v; want ReasonError Unschedulable, Insufficient memory", err)
	}
	if st, err := p.Observe(ctx, "big"); err != nil || st != provider.Stopped {
		t.Fatalf("Observe: %v %v; want Stopped (a pending pod)", st, err)
	}
}
