package kubernetes

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantryhq/gantry/workspace/provider"
)

// ReasonUnschedulable is the error_info.reason of a start whose Pod no node
// can take; a container waiting reason (ImagePullBackOff, …) is used as is.
const ReasonUnschedulable = "Unschedulable"

// waitingTrouble are the container waiting reasons that a start cannot
// wait out: the image is not there, the Pod's spec is wrong, or the
// command keeps crashing.
var waitingTrouble = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "CrashLoopBackOff": true,
}

// podEnded reports whether the Pod's containers have all ended for good
// (restart policy Never).
func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// podReady: the wait of Start. Done when Pod uid is Ready (nil), ended, or
// in trouble that waiting does not cure (a ReasonError).
func podReady(pod *corev1.Pod, uid string) (bool, error) {
	switch {
	case pod == nil || string(pod.UID) != uid:
		return false, nil // not in the cache yet
	case pod.DeletionTimestamp != nil:
		return true, fmt.Errorf("%w: pod %s", errDeletedWhileStarting, pod.Name)
	case podEnded(pod):
		return true, podExitError(pod)
	}
	if reason, msg := podTrouble(pod); reason != "" {
		return true, &provider.ReasonError{Reason: reason, Err: fmt.Errorf("pod %s/%s: %s", pod.Namespace, pod.Name, msg)}
	}
	return isReady(pod), nil
}

// isReady: the Pod's Ready condition is True.
func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// errDeletedWhileStarting: someone else deleted the Pod Start made.
var errDeletedWhileStarting = errors.New("kubernetes: the pod was deleted while it started")

// podGone: done once Pod uid is no longer in the cache.
func podGone(pod *corev1.Pod, uid string) (bool, error) {
	return pod == nil || string(pod.UID) != uid, nil
}

// unboundClaims is the scheduler's word for a Pod whose claims are not bound
// yet (its VolumeBinding plugin): the provisioner is still at work, so the
// wait goes on; any other reason a Pod cannot be scheduled ends it.
const unboundClaims = "unbound immediate PersistentVolumeClaims"

// podTrouble is why a pending Pod cannot start, if it cannot: the
// scheduler found no node, or a container waits for what will not come.
func podTrouble(pod *corev1.Pod) (reason, msg string) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
			!strings.Contains(c.Message, unboundClaims) {
			return ReasonUnschedulable, c.Message
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && waitingTrouble[w.Reason] {
			return w.Reason, fmt.Sprintf("container %s: %s", cs.Name, w.Message)
		}
	}
	return "", ""
}

// podExit is how an ended Pod's workspace container ended.
func podExit(pod *corev1.Pod) provider.Exit {
	e := provider.Exit{Status: string(pod.Status.Phase), Code: -1}
	if pod.Status.Reason != "" { // Evicted, DeadlineExceeded, …: the kubelet ended it
		e.Status = pod.Status.Reason
		if pod.Status.Message != "" {
			e.Status += ": " + pod.Status.Message
		}
		e.Output = pod.Status.Message
	}
	for _, cs := range pod.Status.ContainerStatuses {
		t := cs.State.Terminated
		if t == nil {
			t = cs.LastTerminationState.Terminated
		}
		if t == nil {
			continue
		}
		e.Code, e.At, e.Output = int(t.ExitCode), t.FinishedAt.Time, t.Message
		e.Status = fmt.Sprintf("exit %d", t.ExitCode)
		if t.Reason != "" && t.Reason != "Completed" && t.Reason != "Error" {
			e.Status += " (" + t.Reason + ")"
		}
		break
	}
	if e.At.IsZero() {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.LastTransitionTime.After(e.At) {
				e.At = c.LastTransitionTime.Time
			}
		}
	}
	return e
}

// podExitError is Start's error for a Pod that ended: an ExitError (reason
// Exited, so the crash-loop policy applies as on every provider) whose status
// names why the Pod ended: "exit 137 (OOMKilled)", "Evicted: The node was
// low on resource: memory."
func podExitError(pod *corev1.Pod) error {
	return &provider.ExitError{Exit: podExit(pod)}
}

// describe says where a Pod is, for a timeout's message.
func describe(pod *corev1.Pod) string {
	if pod == nil {
		return "not created (or not seen) yet"
	}
	if reason, msg := podTrouble(pod); reason != "" {
		return reason + ": " + msg
	}
	s := "phase " + string(pod.Status.Phase)
	if pod.Spec.NodeName == "" {
		s += ", not scheduled"
	} else {
		s += ", on node " + pod.Spec.NodeName
	}
	return s
}

// errNoJobImage: Archive or Restore without Config.JobImage.
var errNoJobImage = errors.New("kubernetes: archive and restore need Config.JobImage (--job-image: an image holding the gantry binary)")
