package kubernetes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/provider"
)

// TestStartAndStopAreIdempotent: a second Start finds the running Pod (same UID, no
// second Pod); Stop keeps the claim; a Start after a Pod that ended replaces it.
func TestStartAndStopAreIdempotent(t *testing.T) {
	c := newTestCluster(t)
	p := c.provider(c.config())
	ctx := t.Context()
	if err := p.Provision(ctx, "idem"); err != nil {
		t.Fatal(err)
	}
	if err := p.Provision(ctx, "idem"); err != nil {
		t.Fatalf("second Provision: %v", err)
	}
	spec := provider.Spec{ID: "idem", Owner: "alice", Name: "idem"}
	if err := p.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	first := c.pods(map[string]string{LabelWorkspaceID: "idem"})
	if err := p.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	again := c.pods(map[string]string{LabelWorkspaceID: "idem"})
	if len(first) != 1 || len(again) != 1 || first[0].UID != again[0].UID || again[0].Labels[LabelOwner] != "alice" {
		t.Fatalf("pods after two Starts: %s then %s; want the same one pod, labelled with its owner", podSummary(first), podSummary(again))
	}
	if st, err := p.Observe(ctx, "idem"); err != nil || st != provider.Running {
		t.Fatalf("Observe: %v %v", st, err)
	}

	// The command ended (as a kubelet reports it): Observe says Stopped, Exited says how,
	// and Start replaces the Pod.
	pod := again[0].DeepCopy()
	now := metav1.Now()
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "workspace", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: now}}}}
	if _, err := c.cli.CoreV1().Pods(c.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "ended pod observed", func() (bool, string) {
		st, err := p.Observe(ctx, "idem")
		return st == provider.Stopped, st.String() + " " + errString(err)
	})
	e, err := p.Exited(ctx, "idem", now.Add(-time.Second))
	if err != nil || e == nil || e.Code != 137 || e.Status != "exit 137 (OOMKilled)" {
		t.Fatalf("Exited: %+v %v; want exit 137 (OOMKilled)", e, err)
	}
	if err := p.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if pods := c.pods(map[string]string{LabelWorkspaceID: "idem"}); len(pods) != 1 || pods[0].UID == pod.UID {
		t.Fatalf("after Start of an ended pod: %s; want one new pod", podSummary(pods))
	}

	if err := p.Stop(ctx, "idem"); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx, "idem"); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if ok, err := p.VolumeExists(ctx, "idem"); err != nil || !ok {
		t.Fatalf("VolumeExists after Stop: %v %v; want the claim kept", ok, err)
	}
}

// TestRestoreOfACorruptArchiveIsPermanent: a restore Pod that finds the archive does not
// match its .meta exits ExitPermanent; Restore returns a PermanentError with the reason
// the Pod wrote (ChecksumMismatch), and the claim is not marked complete.
func TestRestoreOfACorruptArchiveIsPermanent(t *testing.T) {
	c := newTestCluster(t)
	p := c.provider(c.config())
	ctx := t.Context()
	if err := p.Provision(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "claim bound", func() (bool, string) {
		pvc, err := c.cli.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, ClaimName("src"), metav1.GetOptions{})
		return err == nil && pvc.Status.Phase == corev1.ClaimBound, errString(err)
	})
	writeTree(t, filepath.Join(c.claimDir("src"), "home"), map[string]string{"a.txt": "alpha\n"})
	key, err := p.Archive(ctx, "src", "op-1")
	if err != nil {
		t.Fatal(err)
	}
	// Flip the archive's bytes on the storage.
	blob := filepath.Join(c.blobs, filepath.FromSlash(key))
	b, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(blob, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err = p.Restore(ctx, "dst", key)
	var pe *provider.PermanentError
	if !errors.As(err, &pe) || pe.Reason != "ChecksumMismatch" {
		t.Fatalf("Restore of a corrupt archive: %v; want a PermanentError ChecksumMismatch", err)
	}
	if ok, err := p.VolumeExists(ctx, "dst"); err != nil || ok {
		t.Fatalf("VolumeExists after a failed restore: %v %v; want false", ok, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestExecAndLogsThroughTheAPIServer: `ws exec` and `ws logs` reach a workspace through
// the API server's exec and log subresources, which it proxies to the node's kubelet
// endpoint. kwok serves that endpoint: its exec runs the command on this host (as nobody),
// and its log is the file the script wrote for every workspace container.
func TestExecAndLogsThroughTheAPIServer(t *testing.T) {
	c := newTestCluster(t)
	c.addNodes("exec", 1, "4", "8Gi")
	cfg := c.config()
	cfg.NodeSelector = map[string]string{"gantry-test": c.ns}
	p := c.provider(cfg)
	ctx := t.Context()
	if err := p.Provision(ctx, "shell"); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx, provider.Spec{ID: "shell"}); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	status, err := p.Exec(ctx, provider.ExecSpec{ID: "shell", Argv: []string{"sh", "-c", "echo hello; echo oops >&2; read line; echo got $line"}},
		strings.NewReader("input\n"), &out, &errOut)
	if err != nil || status != 0 || out.String() != "hello\ngot input\n" || errOut.String() != "oops\n" {
		t.Fatalf("Exec: status %d err %v stdout %q stderr %q; want 0, \"hello\\ngot input\\n\", \"oops\\n\"", status, err, out.String(), errOut.String())
	}
	// A kubelet reports a non-zero exit as NonZeroExitCode, which Exec returns as the
	// status; kwok reports it as an internal error naming the status. Either way the
	// caller learns it.
	status, err = p.Exec(ctx, provider.ExecSpec{ID: "shell", Argv: []string{"sh", "-c", "exit 3"}}, nil, &out, &errOut)
	if status != 3 && (err == nil || !strings.Contains(err.Error(), "exit status 3")) {
		t.Fatalf("Exec of exit 3: status %d err %v", status, err)
	}
	var logs strings.Builder
	if err := p.Logs(ctx, "shell", 0, false, &logs); err != nil || !strings.Contains(logs.String(), "simulated output of a workspace container") {
		t.Fatalf("Logs: %v %q", err, logs.String())
	}
	if _, err := p.Exec(ctx, provider.ExecSpec{ID: "absent", Argv: []string{"true"}}, nil, &out, &errOut); !errors.Is(err, provider.ErrNotRunning) {
		t.Fatalf("Exec in a workspace with no pod: %v; want ErrNotRunning", err)
	}
}

// TestStartSeesThePodWhenTheWatchIsBehind: with the provider's Pod cache frozen after
// its first list (as when the watch under it has not resumed yet after an API server
// restart), Start still sees its Pod become ready, by reading it from the API server
// when the cache shows no change: it returns well within its timeout, not at it.
func TestStartSeesThePodWhenTheWatchIsBehind(t *testing.T) {
	_, p := frozenCacheProvider(t, "behind")
	ctx := t.Context()
	start := time.Now()
	if err := p.Start(ctx, provider.Spec{ID: "behind", Owner: "alice", Name: "behind"}); err != nil {
		t.Fatalf("Start with the watch behind: %v", err)
	}
	if poll := p.cfg.PollEvery; time.Since(start) > 4*poll {
		t.Fatalf("Start took %v with the watch behind; want about one poll (%v)", time.Since(start), poll)
	}
	if pod, err := p.w.pod(PodName("behind")); err != nil || pod != nil {
		t.Fatalf("cache has the pod (%v, %v): the watch was not behind, the test proves nothing", pod != nil, err)
	}
}

// TestStartMakesAgainAPodDeletedOutright: a Pod removed at once (grace period 0) right
// after Start made it, with the provider's cache frozen so that no terminating state is
// ever seen, is found gone on the API server at the next poll and made again: Start
// succeeds with a new Pod instead of waiting out its timeout.
func TestStartMakesAgainAPodDeletedOutright(t *testing.T) {
	c, p := frozenCacheProvider(t, "outright")
	ctx := t.Context()
	deleted := make(chan types.UID, 1)
	go func() {
		defer close(deleted)
		for ctx.Err() == nil {
			pod, err := c.cli.CoreV1().Pods(c.ns).Get(ctx, PodName("outright"), metav1.GetOptions{})
			if err == nil {
				if err := c.cli.CoreV1().Pods(c.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err == nil {
					deleted <- pod.UID
				}
				return
			}
			time.Sleep(5 * time.Millisecond) // real time: the Pod appears through another client
		}
	}()
	start := time.Now()
	if err := p.Start(ctx, provider.Spec{ID: "outright", Owner: "alice", Name: "outright"}); err != nil {
		t.Fatalf("Start with its Pod deleted outright: %v", err)
	}
	took := time.Since(start)
	first, ok := <-deleted
	if !ok {
		t.Fatal("the Pod was never deleted: the test proves nothing")
	}
	pods := c.pods(map[string]string{LabelWorkspaceID: "outright"})
	if len(pods) != 1 || pods[0].UID == first {
		t.Fatalf("after Start: %s; want one new pod (the deleted one was %s)", podSummary(pods), first)
	}
	if took > 6*p.cfg.PollEvery {
		t.Fatalf("Start took %v; want a poll or two (%v each)", took, p.cfg.PollEvery)
	}
}

// frozenCacheProvider is a provider with workspace id provisioned whose Pod cache
// keeps what it first listed: no change reaches it any more, as when the watch under
// it is behind.
func frozenCacheProvider(t *testing.T, id string) (*testCluster, *Provider) {
	c := newTestCluster(t)
	p := c.provider(c.config())
	if err := p.Provision(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := p.w.waitSynced(t.Context(), time.Minute); err != nil {
		t.Fatal(err)
	}
	p.w.stop()
	return c, p
}
