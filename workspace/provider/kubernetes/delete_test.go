package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/server"
)

// slowRetries makes a failed operation wait 10 s for its retry (and retry
// for minutes): a delete that waited behind the retries would take that long.
func slowRetries(cfg *server.ServerConfig) {
	cfg.Reconciler.RetryBackoff, cfg.Reconciler.MaxRetries = 10*time.Second, 10
}

// deletedWithin deletes id through the API and waits at most d for it to be
// gone.
func (s *wsServer) deletedWithin(t *testing.T, id string, d time.Duration) {
	t.Helper()
	t0 := time.Now()
	if _, err := s.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, d, "workspace "+id+" DELETED", func() (bool, string) {
		w, err := s.Get(t.Context(), id)
		var ae *client.APIError
		return errors.As(err, &ae) && ae.Status == http.StatusNotFound, fmt.Sprintf("observed %s desired %s op %q error %+v (%v)",
			w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorInfo, err)
	})
	t.Logf("DELETED %v after the delete", time.Since(t0).Round(time.Millisecond))
}

// failing waits until id's operation op has failed and waits for its retry.
func (s *wsServer) failing(t *testing.T, id string, op workspace.Operation) {
	t.Helper()
	testutil.WaitFor(t, time.Minute, fmt.Sprintf("workspace %s failing in %s", id, op), func() (bool, string) {
		w, err := s.Get(t.Context(), id)
		return err == nil && w.Operation == op && w.ErrorCount >= 1 && w.NextRetryAt != nil,
			fmt.Sprintf("observed %s op %q count %d error %+v (%v)", w.ObservedStatus, w.Operation, w.ErrorCount, w.ErrorInfo, err)
	})
}

// TestDeleteOfFailingProvisioning: the server's namespace does not exist
// (it was deleted after the server started), so every PROVISIONING of a new
// workspace fails ("namespaces … not found") and is retried; `ws delete`
// takes over from the retries and the workspace is DELETED within 2 s.
func TestDeleteOfFailingProvisioning(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config()
	p := c.provider(cfg)
	s := startServer(t, p, slowRetries)
	if err := c.cli.CoreV1().Namespaces().Delete(t.Context(), c.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, time.Minute, "namespace "+c.ns+" gone", func() (bool, string) {
		_, err := c.cli.CoreV1().Namespaces().Get(t.Context(), c.ns, metav1.GetOptions{})
		return isNotFound(err), fmt.Sprint(err)
	})
	w, err := s.Create(t.Context(), workspace.NewWorkspace{Name: "no-namespace", Desired: workspace.Running, Command: "sleep infinity"})
	if err != nil {
		t.Fatal(err)
	}
	s.failing(t, w.ID, workspace.OpProvisioning)
	s.deletedWithin(t, w.ID, 2*time.Second)
}

// TestDeleteOfCrashLoop: the workspace's command ends (as a kubelet reports
// it: the Pod Failed, exit 3) while it runs; its restart fails on that end
// and waits 10 s for its retry; `ws delete` takes over from the retries:
// DELETED within 2 s, its Pod and claim gone.
func TestDeleteOfCrashLoop(t *testing.T) {
	c := newTestCluster(t)
	p := c.provider(c.config())
	s := startServer(t, p, slowRetries)
	ctx := t.Context()
	w, err := s.Create(ctx, workspace.NewWorkspace{Name: "crash-loop", Desired: workspace.Running, Command: "exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	s.waitState(t, w.ID, workspace.Running, time.Minute)
	pod, err := c.cli.CoreV1().Pods(c.ns).Get(ctx, PodName(w.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "workspace", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", FinishedAt: metav1.Now()}}}}
	if _, err := c.cli.CoreV1().Pods(c.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.failing(t, w.ID, workspace.OpStarting)
	s.deletedWithin(t, w.ID, 2*time.Second)
	testutil.WaitFor(t, 30*time.Second, "pod and claim gone", func() (bool, string) {
		pods := c.pods(map[string]string{LabelWorkspaceID: w.ID})
		_, err := c.cli.CoreV1().PersistentVolumeClaims(c.ns).Get(context.WithoutCancel(ctx), ClaimName(w.ID), metav1.GetOptions{})
		return len(pods) == 0 && isNotFound(err), podSummary(pods) + " claim: " + fmt.Sprint(err)
	})
}
