package kubernetes

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gantryhq/gantry/workspace/provider"
)

// TestPodStatusReasons: what a Pod's status (as a kubelet and the scheduler write it)
// means for Start: the reason recorded in error_info, or a wait that goes on.
func TestPodStatusReasons(t *testing.T) {
	waiting := func(reason, msg string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "workspace",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}}
	}
	unschedulable := func(msg string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}}
	}
	for _, tc := range []struct {
		name   string
		status corev1.PodStatus
		done   bool
		reason string // "" with done: no error; "exit": a plain ExitError (reason Exited), its status naming why
		text   string
	}{
		{"pending", corev1.PodStatus{Phase: corev1.PodPending}, false, "", ""},
		{"claims not bound yet", unschedulable("0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: …"), false, "", ""},
		{"no node fits", unschedulable("0/4 nodes are available: 4 Insufficient cpu."), true, ReasonUnschedulable, "Insufficient cpu"},
		{"image pull", waiting("ImagePullBackOff", `Back-off pulling image "nope:1"`), true, "ImagePullBackOff", "nope:1"},
		{"bad image name", waiting("InvalidImageName", "couldn't parse image name"), true, "InvalidImageName", "parse"},
		{"creating", waiting("ContainerCreating", ""), false, "", ""},
		{"ready", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}, true, "", ""},
		{"running, not ready", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}, false, "", ""},
		{"oom killed", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "workspace",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}}, true, "exit", "exit 137 (OOMKilled)"},
		{"evicted", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}, true, "exit", "Evicted: The node was low on resource"},
		{"exited", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "workspace",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", Message: "boom"}}}}}, true, "exit", "exit 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ws-x", UID: "u1"}, Status: tc.status}
			done, err := podReady(pod, "u1")
			if done != tc.done {
				t.Fatalf("done = %v (%v), want %v", done, err, tc.done)
			}
			var re *provider.ReasonError
			var ee *provider.ExitError
			switch {
			case tc.reason == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case tc.reason == "exit" && (!errors.As(err, &ee) || errors.As(err, &re)):
				t.Fatalf("err = %v, want a plain ExitError", err)
			case tc.reason != "" && tc.reason != "exit" && (!errors.As(err, &re) || re.Reason != tc.reason):
				t.Fatalf("err = %v, want ReasonError %s", err, tc.reason)
			}
			if tc.text != "" && !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.text)
			}
		})
	}
	if done, _ := podReady(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "other"}}, "u1"); done {
		t.Fatal("a Pod with another UID (not in the cache yet, or replaced) ended the wait")
	}
}

// TestJobWaitsForItsOwnClaim: a job Pod the scheduler has not matched to
// its (just made) claim yet keeps waiting; another claim's absence, or no
// node fitting, ends the wait with Unschedulable.
func TestJobWaitsForItsOwnClaim(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ws-a-restore-1", Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{claimVolume("volume", "a")}}}
	for _, tc := range []struct {
		msg  string
		done bool
	}{
		{`0/4 nodes are available: persistentvolumeclaim "ws-a-home" not found.`, false},
		{`0/4 nodes are available: persistentvolumeclaim "ws-b-home" not found.`, true},
		{"0/4 nodes are available: 4 Insufficient cpu.", true},
	} {
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: tc.msg}}}
		done, err := jobDone(pod, "u")
		var re *provider.ReasonError
		if done != tc.done || done && (!errors.As(err, &re) || re.Reason != ReasonUnschedulable) {
			t.Errorf("%q: done=%v err=%v; want done=%v (Unschedulable when done)", tc.msg, done, err, tc.done)
		}
	}
}

// TestStartWaitsForAClaimTheSchedulerHasNotSeen: a workspace Pod the
// scheduler cannot place because its cache lacks the claim keeps waiting
// while the API server has the claim (Provision then Start at once); with
// the claim really missing, or no node fitting, the wait ends with
// Unschedulable.
func TestStartWaitsForAClaimTheSchedulerHasNotSeen(t *testing.T) {
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: ClaimName("a"), Namespace: "ns"}}
	withClaim := &Provider{cli: fake.NewClientset(claim), cfg: Config{Namespace: "ns"}}
	without := &Provider{cli: fake.NewClientset(), cfg: Config{Namespace: "ns"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: PodName("a"), Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{claimVolume("home", "a")}}}
	for _, tc := range []struct {
		p    *Provider
		msg  string
		done bool
	}{
		{withClaim, `0/4 nodes are available: persistentvolumeclaim "ws-a-home" not found.`, false},
		{without, `0/4 nodes are available: persistentvolumeclaim "ws-a-home" not found.`, true},
		{withClaim, "0/4 nodes are available: 4 Insufficient memory.", true},
	} {
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: tc.msg}}}
		done, err := tc.p.startWait(t.Context(), "a")(pod, "u")
		var re *provider.ReasonError
		if done != tc.done || done && (!errors.As(err, &re) || re.Reason != ReasonUnschedulable) {
			t.Errorf("claim there %v, %q: done=%v err=%v; want done=%v (Unschedulable when done)", tc.p == withClaim, tc.msg, done, err, tc.done)
		}
	}
}
