package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
)

var (
	_ provider.Storage      = (*Provider)(nil)
	_ provider.ArchiveStore = (*Provider)(nil)
)

// VolumeMount is where a job Pod mounts the claim; the workspace's files
// are its "home" sub-directory (what the workspace Pod mounts).
const VolumeMount = "/volume"

// VolumePath names the workspace's claim (there is no host directory).
func (p *Provider) VolumePath(id string) string {
	return "pvc:" + p.cfg.Namespace + "/" + ClaimName(id)
}

// claim is the workspace's claim, nil if there is none.
func (p *Provider) claim(ctx context.Context, id string) (*corev1.PersistentVolumeClaim, error) {
	c, err := p.cli.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Get(ctx, ClaimName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap("get claim of", id, err)
	}
	return c, nil
}

// VolumeExists reports whether the workspace's claim exists and is
// complete (not a restore that did not finish).
func (p *Provider) VolumeExists(ctx context.Context, id string) (bool, error) {
	c, err := p.claim(ctx, id)
	return c != nil && c.Annotations[AnnotationVolumeReady] == "true", err
}

// Provision creates an empty claim, complete from the start; no-op if a
// complete one exists.
func (p *Provider) Provision(ctx context.Context, id string) error {
	_, err := p.cli.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Create(ctx, p.claimSpec(id, true), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return wrap("create claim of", id, err)
	}
	if ok, err := p.VolumeExists(ctx, id); err != nil || ok {
		return err
	}
	return p.markReady(ctx, id)
}

// ensureClaim creates the workspace's claim, not yet complete, unless one
// exists.
func (p *Provider) ensureClaim(ctx context.Context, id string) error {
	_, err := p.cli.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Create(ctx, p.claimSpec(id, false), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return wrap("create claim of", id, err)
	}
	return nil
}

func (p *Provider) claimSpec(id string, ready bool) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: ClaimName(id), Namespace: p.cfg.Namespace, Labels: p.labels(id, RoleWorkspace)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: p.cfg.VolumeSize}},
		},
	}
	if ready {
		pvc.Annotations = map[string]string{AnnotationVolumeReady: "true"}
	}
	if p.cfg.StorageClass != "" {
		pvc.Spec.StorageClassName = &p.cfg.StorageClass
	}
	return pvc
}

// markReady records that the claim's contents are complete.
func (p *Provider) markReady(ctx context.Context, id string) error {
	patch := []byte(`{"metadata":{"annotations":{"` + AnnotationVolumeReady + `":"true"}}}`)
	_, err := p.cli.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Patch(ctx, ClaimName(id), types.MergePatchType, patch, metav1.PatchOptions{})
	return wrap("mark the claim ready of", id, err)
}

// DeleteVolume deletes the workspace's claim; no-op if absent.
func (p *Provider) DeleteVolume(ctx context.Context, id string) error {
	err := p.cli.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Delete(ctx, ClaimName(id), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return wrap("delete claim of", id, err)
	}
	return nil
}

// Archive packs the claim into the archive of opID with an archive Pod
// (`gantry ws volume pack`), unless that archive is already committed, and
// returns its key. The claim stays: the reconciler records the key, then
// calls DeleteVolume.
func (p *Provider) Archive(ctx context.Context, id, opID string) (string, error) {
	key := provider.ArchiveKey(id, opID)
	if ok, err := archive.Committed(ctx, p.cfg.Archives, key); err != nil || ok {
		return key, err
	}
	c, err := p.claim(ctx, id)
	if err != nil {
		return "", err
	}
	if c == nil {
		return "", provider.Permanent("VolumeMissing", fmt.Errorf("kubernetes: workspace %s has no claim and no committed archive %s", id, key))
	}
	if err := p.runJob(ctx, id, RoleArchive, key, "pack"); err != nil {
		return "", err
	}
	if ok, err := archive.Committed(ctx, p.cfg.Archives, key); err != nil || !ok {
		return "", errors.Join(fmt.Errorf("kubernetes: workspace %s: the archive pod succeeded but %s is not committed", id, key), err)
	}
	return key, nil
}

// Restore fills a new claim from the archive under key with a restore Pod
// (`gantry ws volume unpack`) and only then marks the claim complete; a
// complete claim means an earlier Restore finished.
func (p *Provider) Restore(ctx context.Context, id, key string) error {
	if ok, err := p.VolumeExists(ctx, id); err != nil || ok {
		return err
	}
	if ok, err := archive.Committed(ctx, p.cfg.Archives, key); err != nil {
		return err
	} else if !ok {
		return provider.Permanent("ArchiveNotFound", fmt.Errorf("%w: %s", provider.ErrArchiveNotFound, key))
	}
	if err := p.ensureClaim(ctx, id); err != nil {
		return err
	}
	if err := p.runJob(ctx, id, RoleRestore, key, "unpack"); err != nil {
		return err
	}
	return p.markReady(ctx, id)
}

// JobPodName is the archive or restore Pod of workspace id for key: one
// name per (role, key), so a retry finds the Pod an earlier attempt made.
func JobPodName(id, role, key string) string {
	sum := sha256.Sum256([]byte(key))
	return "ws-" + id + "-" + role + "-" + hex.EncodeToString(sum[:5])
}

// runJob runs `gantry ws volume <op>` on the claim in a Pod and waits for
// it to succeed; the Pod is deleted after it succeeded.
func (p *Provider) runJob(ctx context.Context, id, role, key, op string) error {
	if p.cfg.JobImage == "" || p.cfg.ArchiveURL == "" {
		return errNoJobImage
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.JobTimeout)
	defer cancel()
	name := JobPodName(id, role, key)
	pods := p.cli.CoreV1().Pods(p.cfg.Namespace)
	for {
		pod, err := pods.Create(ctx, p.jobPod(id, role, name, key, op), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			pod, err = pods.Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			return wrap("run the "+role+" pod of", id, err)
		}
		if pod.Status.Phase == corev1.PodFailed || pod.DeletionTimestamp != nil {
			// An earlier attempt failed: start over with a new Pod.
			if err := p.deletePod(ctx, id, name, string(pod.UID)); err != nil {
				return err
			}
			if err := p.waitPod(ctx, id, name, string(pod.UID), podGone); err != nil {
				return err
			}
			continue
		}
		if err := p.waitPod(ctx, id, name, string(pod.UID), jobDone); err != nil {
			return err
		}
		p.cfg.Logger.Info("kubernetes: "+role+" pod succeeded", "workspace", id, "pod", name, "key", key)
		return p.deletePod(ctx, id, name, string(pod.UID))
	}
}

// jobPod is an archive or restore Pod: the gantry binary over the claim.
func (p *Provider) jobPod(id, role, name, key, op string) *corev1.Pod {
	args := append(append([]string(nil), p.cfg.JobCommand[1:]...),
		"ws", "volume", op, "--storage", p.cfg.ArchiveURL, "--key", key, "--dir", VolumeMount+"/home")
	c := corev1.Container{
		Name: "job", Image: p.cfg.JobImage, Command: p.cfg.JobCommand[:1], Args: args,
		VolumeMounts:             []corev1.VolumeMount{{Name: "volume", MountPath: VolumeMount}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if p.cfg.ArchiveSecret != "" {
		c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: p.cfg.ArchiveSecret}}}}
	}
	deadline := int64(p.cfg.JobTimeout.Seconds())
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace, Labels: p.labels(id, role)},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: new(false),
			EnableServiceLinks:           new(false),
			ActiveDeadlineSeconds:        &deadline,
			NodeSelector:                 p.cfg.NodeSelector,
			Containers:                   []corev1.Container{c},
			Volumes:                      []corev1.Volume{claimVolume("volume", id)},
		},
	}
}

// jobDone: done when the job Pod succeeded (nil) or failed (its error: a
// PermanentError when it exited ExitPermanent, naming the reason it wrote).
func jobDone(pod *corev1.Pod, uid string) (bool, error) {
	switch {
	case pod == nil || string(pod.UID) != uid:
		return false, nil
	case pod.Status.Phase == corev1.PodSucceeded:
		return true, nil
	case pod.Status.Phase == corev1.PodFailed:
		e := podExit(pod)
		msg := strings.TrimSpace(e.Output)
		if e.Code == ExitPermanent {
			reason, rest, _ := strings.Cut(msg, ": ")
			return true, provider.Permanent(reason, errors.New(rest))
		}
		return true, fmt.Errorf("kubernetes: job pod %s failed (%s): %s", pod.Name, e.Status, msg)
	}
	if reason, msg := podTrouble(pod); reason != "" && !ownClaimNotSeenYet(pod, msg) {
		return true, &provider.ReasonError{Reason: reason, Err: fmt.Errorf("pod %s/%s: %s", pod.Namespace, pod.Name, msg)}
	}
	return false, nil
}

// ownClaimNotSeenYet reports whether the scheduler's reason is that it has
// not seen the job Pod's claim yet. runJob's callers have just found or
// made that claim (Archive, Restore), so this is the scheduler's cache
// behind the API server, which the wait outlasts: a clean-clone CI run
// failed a restore on it.
func ownClaimNotSeenYet(pod *corev1.Pod, msg string) bool {
	for _, v := range pod.Spec.Volumes {
		if c := v.PersistentVolumeClaim; c != nil && strings.Contains(msg, fmt.Sprintf("persistentvolumeclaim %q not found", c.ClaimName)) {
			return true
		}
	}
	return false
}

// The archives are blobs; listing and removing them needs no volume.

func (p *Provider) blobs() *archive.Storage { return &archive.Storage{Blobs: p.cfg.Archives} }

// Archives lists workspace id's archives, newest first.
func (p *Provider) Archives(ctx context.Context, id string) ([]provider.ArchiveInfo, error) {
	return p.blobs().Archives(ctx, id)
}

// Holders lists every workspace id that has blobs.
func (p *Provider) Holders(ctx context.Context) (map[string]*provider.ArchiveHolder, error) {
	return p.blobs().Holders(ctx)
}

// DeleteArchive removes one archive, its commit marker first.
func (p *Provider) DeleteArchive(ctx context.Context, key string) error {
	return p.blobs().DeleteArchive(ctx, key)
}

// Forget removes every blob of workspace id.
func (p *Provider) Forget(ctx context.Context, id string) error { return p.blobs().Forget(ctx, id) }

// Tombstone records that workspace id was deleted at now.
func (p *Provider) Tombstone(ctx context.Context, id string, now time.Time) error {
	return p.blobs().Tombstone(ctx, id, now)
}
