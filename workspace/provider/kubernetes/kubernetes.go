// Package kubernetes runs workspaces on a Kubernetes cluster: the
// provider.Container and provider.Storage of `gantry ws serve --provider
// kubernetes`.
//
// One workspace is one Pod "ws-{id}" (labels gantry.dev/workspace-id,
// gantry.dev/owner, gantry.dev/role=workspace; restart policy Never: the
// reconciler and the health monitor own restarts) whose files live on a
// PersistentVolumeClaim "ws-{id}-home" mounted at /home/coder, and a
// NetworkPolicy "ws-{id}" admitting only the server to its PORT (the claim's
// "home" sub-directory). "Stop" deletes the Pod and keeps the claim; "delete"
// removes both. Archive and restore run as short-lived Pods (role archive or
// restore) that mount the claim and stream it to and from the archive
// storage in the format of package archive (tar+zstd, sha256 .meta written
// last) by running `gantry ws volume pack|unpack` (volumejob.go), so the
// server never needs the volume on its own disk.
//
// Every fact lives in the cluster: Observe reads an informer's cache of the
// namespace's Pods (one watch, resynced), so a gantry restart finds every
// workspace again, and each change of a workspace's Pod is handed to the
// server as a hint (OnChange) instead of being polled for.
//
// Tour:
//
//	kubernetes.go  Config, New, names, Start (idempotent, waits for Ready),
//	               Stop, Observe, the Pod's spec
//	policy.go      the NetworkPolicy of each workspace: ingress only from
//	               the server (ServerPeers), only to its PORT
//	watch.go       the informer: cache, per-workspace wake-ups, OnChange
//	status.go      what a Pod's status means: ready, failed and why
//	               (Unschedulable, ImagePullBackOff, OOMKilled, Evicted …)
//	storage.go     the claim, Archive/Restore through job Pods, the archives
//	volumejob.go   what a job Pod runs: pack a claim into an archive or
//	               unpack one into it
//	access.go      Exec, Logs, Endpoint, Exited through the API server
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantryhq/gantry/workspace/provider"
)

// Labels and annotations this package puts on what it creates.
const (
	LabelWorkspaceID = "gantry.dev/workspace-id"
	LabelOwner       = "gantry.dev/owner"
	LabelRole        = "gantry.dev/role" // workspace, archive, restore
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	ManagedBy        = "gantry"
	// AnnotationName and AnnotationOwner carry the workspace's human name
	// and its owner.
	AnnotationName  = "gantry.dev/workspace-name"
	AnnotationOwner = "gantry.dev/owner"
	// AnnotationVolumeReady marks a claim whose contents are complete: a
	// fresh claim, or one a restore Pod filled. A claim without it is a
	// restore that did not finish.
	AnnotationVolumeReady = "gantry.dev/volume-ready"
)

// Roles of the Pods this package creates.
const (
	RoleWorkspace = "workspace"
	RoleArchive   = "archive"
	RoleRestore   = "restore"
)

// stopGraceSeconds is how long a stopped workspace's command has between
// SIGTERM and SIGKILL.
const stopGraceSeconds = 5

// ContainerPort is the PORT a workspace's command is given.
const ContainerPort = 8080

// ErrUnreachable: the API server did not answer. Retryable; it matches
// provider.ErrUnreachable.
var ErrUnreachable = provider.NewUnreachable("kubernetes: API server unreachable")

// Config configures a Provider. Zero values are the documented defaults.
type Config struct {
	// Client talks to the API server; nil = built from Kubeconfig.
	Client kubernetes.Interface
	// REST is the client's configuration (exec needs it); nil = built
	// from Kubeconfig.
	REST *rest.Config
	// Kubeconfig is the kubeconfig file when Client is nil; empty = the
	// usual rules ($KUBECONFIG, ~/.kube/config, in-cluster).
	Kubeconfig string
	// Namespace holds every Pod and claim; zero = "default".
	Namespace string
	// StorageClass of the claims; zero = the cluster's default class.
	StorageClass string
	// VolumeSize is each claim's requested size; zero = 1Gi.
	VolumeSize resource.Quantity
	// Image is the default image when Spec.Image is empty; without one,
	// a spec that names no image is refused (CheckSpec, Start).
	Image string
	// JobImage runs the archive and restore Pods; it must hold the gantry
	// binary as JobCommand[0]. Required for Archive and Restore.
	JobImage string
	// JobCommand is the gantry binary in JobImage; zero = ["gantry"].
	JobCommand []string
	// Archives is the archive storage as this server reaches it, ArchiveURL
	// the same storage as the job Pods reach it (the --storage URL), and
	// ArchiveSecret a Secret whose keys become the job Pods' environment
	// (e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); empty = none.
	Archives      provider.BlobStore
	ArchiveURL    string
	ArchiveSecret string
	// NodeSelector, if set, confines the workspace and job Pods to the
	// nodes with these labels.
	NodeSelector map[string]string
	// ServerPeers are where the server's proxy reaches workspace Pods
	// from: each workspace's NetworkPolicy admits ingress only from them,
	// only to its PORT. Zero = the Pods labelled DefaultServerLabels in
	// Namespace. (A cluster whose network plugin does not enforce
	// NetworkPolicy ignores the policies.)
	ServerPeers ServerPeers
	// MountPath is where the volume appears; zero = /home/coder.
	MountPath string
	// CPUs and Memory (bytes) are every workspace's requests and limits
	// unless its spec sets its own (zero: none).
	CPUs   float64
	Memory int64
	// StartupTimeout bounds Start from create to Ready; zero = 5 min.
	StartupTimeout time.Duration
	// JobTimeout bounds an archive or restore Pod; zero = 30 min.
	JobTimeout time.Duration
	// Resync is the informer's resync period; zero = 5 min.
	Resync time.Duration
	// PollEvery is how long Start waits for a change of its Pod in the
	// cache before it reads the Pod from the API server (the watch under
	// the cache may be behind); zero = 5 s.
	PollEvery time.Duration
	// Logger; nil = discard.
	Logger *slog.Logger
}

func (c *Config) defaults() error {
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.VolumeSize.IsZero() {
		c.VolumeSize = resource.MustParse("1Gi")
	}
	if c.MountPath == "" {
		c.MountPath = "/home/coder"
	}
	if len(c.JobCommand) == 0 {
		c.JobCommand = []string{"gantry"}
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.StartupTimeout, 5 * time.Minute}, {&c.JobTimeout, 30 * time.Minute}, {&c.Resync, 5 * time.Minute}, {&c.PollEvery, 5 * time.Second}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.CPUs < 0 || c.Memory < 0 || c.StartupTimeout < 0 || c.JobTimeout < 0 || c.Resync < 0 || c.PollEvery < 0 {
		return errors.New("kubernetes: Config limits and timeouts must not be negative")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ServerPeers.zero() {
		c.ServerPeers.PodLabels = DefaultServerLabels
	}
	return c.ServerPeers.validate()
}

// Provider is a provider.Container and provider.Storage on a Kubernetes
// cluster. Safe for concurrent use.
type Provider struct {
	cfg  Config
	cli  kubernetes.Interface
	rest *rest.Config
	w    *watcher

	locks provider.IDLocks // per id: a Start and a Stop do not interleave
}

var (
	_ provider.Container    = (*Provider)(nil)
	_ provider.LimitChecker = (*Provider)(nil)
	_ provider.SpecChecker  = (*Provider)(nil)
)

// New returns a Provider and starts its informer; Close stops it. It does
// not wait for the API server: until the informer has synced, Observe
// fails with ErrUnreachable.
func New(cfg Config) (*Provider, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg, cli: cfg.Client, rest: cfg.REST}
	if p.cli == nil || p.rest == nil {
		rc, err := RESTConfig(cfg.Kubeconfig)
		if err != nil {
			return nil, err
		}
		if p.rest == nil {
			p.rest = rc
		}
		if p.cli == nil {
			if p.cli, err = kubernetes.NewForConfig(rc); err != nil {
				return nil, fmt.Errorf("kubernetes: client: %w", err)
			}
		}
	}
	p.w = newWatcher(p.cli, cfg.Namespace, cfg.Resync, cfg.Logger)
	return p, nil
}

// RESTConfig loads a kubeconfig (empty: $KUBECONFIG, ~/.kube/config, or
// the in-cluster configuration).
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: kubeconfig %q: %w", kubeconfig, err)
	}
	rc.QPS, rc.Burst = 300, 600 // the reconciler's own concurrency bounds the load
	return rc, nil
}

// OnChange makes f receive the id of each workspace whose Pod changed (the
// server publishes it as a monitor hint). Set it before the first change
// matters; it may be called from the informer's goroutine at any time.
func (p *Provider) OnChange(f func(id string)) { p.w.setOnChange(f) }

// Close stops the informer.
func (p *Provider) Close() error {
	p.w.stop()
	return nil
}

// Namespace is where the provider's Pods and claims live.
func (p *Provider) Namespace() string { return p.cfg.Namespace }

// ErrNoNamespace: the provider's namespace does not exist (CheckNamespace).
var ErrNoNamespace = errors.New("kubernetes: no such namespace")

// CheckNamespace reports a namespace that does not exist as ErrNoNamespace,
// with how to make it: the provider never creates one, and without it every
// claim and Pod is refused. An API server that does not answer, or
// credentials that may not read namespaces, leave the question open (nil,
// logged): the first is waited out like any outage, the second is how a
// namespaced service account is often set up.
func (p *Provider) CheckNamespace(ctx context.Context) error {
	ns := p.cfg.Namespace
	_, err := p.cli.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: namespace %q does not exist: create it first (kubectl create namespace %s)", ErrNoNamespace, ns, ns)
	case apierrors.IsForbidden(err):
		p.cfg.Logger.Debug("kubernetes: may not read namespaces; namespace not checked", "namespace", ns, "err", err)
	default:
		p.cfg.Logger.Warn("kubernetes: could not check the namespace", "namespace", ns, "err", err)
	}
	return nil
}

// PodName is the workspace Pod's name for workspace id.
func PodName(id string) string { return "ws-" + id }

// ClaimName is the workspace's PersistentVolumeClaim.
func ClaimName(id string) string { return "ws-" + id + "-home" }

func (p *Provider) lock(id string) func() { return p.locks.Lock(id) }

// wrap turns client errors into ones that name the reason: a refused or
// timed-out connection (the API server restarting) is ErrUnreachable.
func wrap(op, id string, err error) error {
	if err == nil {
		return nil
	}
	if unreachable(err) {
		return fmt.Errorf("%w: %s workspace %s: %v", ErrUnreachable, op, id, err)
	}
	return fmt.Errorf("kubernetes: %s workspace %s: %w", op, id, err)
}

func unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || // the server went away mid-request
		errors.Is(err, errNotSynced) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTooManyRequests(err) || errors.As(err, &ne) && ne.Timeout()
}

// CheckLimits refuses a process limit: Kubernetes bounds processes per
// node (the kubelet's podPidsLimit), not per Pod through the API.
func (p *Provider) CheckLimits(l provider.Limits) error {
	if l.Pids > 0 {
		return errors.New("kubernetes: a per-workspace process limit (pids) is set by the cluster's kubelets (podPidsLimit), not per Pod; leave it unset")
	}
	return nil
}

// ErrNoImage: a workspace that names no image, on a provider without a
// default one (Config.Image, `ws serve --image`). CheckSpec returns it, and
// Start as a permanent failure (reason NoImage): no retry can supply one.
var ErrNoImage = errors.New("kubernetes: the workspace names no image and the server has no default one: " +
	"give it one (gantry ws create --image IMAGE, or ws update --image IMAGE) or start the server with a default (gantry ws serve --image IMAGE)")

// CheckSpec refuses a spec Start cannot run: no image (and no default
// one). Its limits are CheckLimits's.
func (p *Provider) CheckSpec(s provider.Spec) error {
	if s.Image == "" && p.cfg.Image == "" {
		return ErrNoImage
	}
	return nil
}

// Start creates the workspace's Pod and returns
// once the Pod is Ready. A Pod that runs or is being scheduled is waited
// for; one that ended (Failed, Succeeded) is deleted and created again,
// since Pods hold no data (the claim does). A Pod that cannot be scheduled
// or whose image cannot be pulled fails Start with that reason
// (provider.ReasonError), and stays, so the scheduler keeps trying.
func (p *Provider) Start(ctx context.Context, spec provider.Spec) error {
	image := spec.Image
	if image == "" {
		image = p.cfg.Image
	}
	if spec.ID == "" {
		return errors.New("kubernetes: start: the spec has no workspace id")
	}
	if image == "" {
		return provider.Permanent("NoImage", fmt.Errorf("workspace %s: %w", spec.ID, ErrNoImage))
	}
	if err := p.CheckLimits(spec.Limits); err != nil {
		return err
	}
	defer p.lock(spec.ID)()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartupTimeout)
	defer cancel()
	if err := p.ensurePolicy(ctx, spec.ID, spec.Ports); err != nil {
		return err
	}
	// The claim is not looked up first: a Pod whose claim is missing does
	// not schedule, and says so (Unschedulable, "persistentvolumeclaim …
	// not found"); Start never creates an empty volume where files were
	// expected. The scheduler says the same of a claim made a moment ago
	// that its cache has not seen yet (Provision then Start at once, as
	// the reconciler does): then the claim is asked for on the API server,
	// and while it is there the wait goes on (startWait).
	// A Pod deleted by someone else while it starts (an admin, an
	// eviction, a late deletion of the Pod it replaced) is made again, a
	// few times; then the error goes to the reconciler's retries.
	for attempt := 1; ; attempt++ {
		uid, err := p.ensurePod(ctx, spec, image)
		if err != nil {
			return err
		}
		err = p.waitPod(ctx, spec.ID, PodName(spec.ID), uid, p.startWait(ctx, spec.ID))
		if !errors.Is(err, errDeletedWhileStarting) || attempt == 3 {
			return err
		}
		p.cfg.Logger.Warn("kubernetes: pod deleted while it started; creating it again", "workspace", spec.ID, "attempt", attempt)
	}
}

// startWait is podReady, except that a Pod the scheduler cannot place
// because it has not seen the workspace's claim yet waits on while the API
// server has the claim (the scheduler retries it); a claim that is really
// missing ends the wait with Unschedulable, as before.
func (p *Provider) startWait(ctx context.Context, id string) podCond {
	return func(pod *corev1.Pod, uid string) (bool, error) {
		done, err := podReady(pod, uid)
		var re *provider.ReasonError
		if !done || !errors.As(err, &re) || re.Reason != ReasonUnschedulable || !ownClaimNotSeenYet(pod, err.Error()) {
			return done, err
		}
		_, gerr := p.cli.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Get(ctx, ClaimName(id), metav1.GetOptions{})
		if gerr == nil {
			return false, nil
		}
		return true, err
	}
}

// ensurePod returns the UID of a live workspace Pod, creating it (after
// removing an ended or terminating one) if needed. It tries the create
// first: one API call in the common case.
func (p *Provider) ensurePod(ctx context.Context, spec provider.Spec, image string) (string, error) {
	pods := p.cli.CoreV1().Pods(p.cfg.Namespace)
	name := PodName(spec.ID)
	for {
		created, err := pods.Create(ctx, p.podSpec(spec, image), metav1.CreateOptions{})
		if err == nil {
			p.cfg.Logger.Info("kubernetes: pod created", "workspace", spec.ID, "pod", name, "image", image)
			return string(created.UID), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", wrap("create pod of", spec.ID, err)
		}
		cur, err := pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue // deleted in between
		case err != nil:
			return "", wrap("get pod of", spec.ID, err)
		case cur.Labels[LabelWorkspaceID] != spec.ID:
			return "", fmt.Errorf("kubernetes: pod %s/%s exists but is not labelled %s=%s; refusing to touch it", p.cfg.Namespace, name, LabelWorkspaceID, spec.ID)
		case cur.DeletionTimestamp == nil && !podEnded(cur):
			return string(cur.UID), nil
		}
		// Ended or terminating: remove it and wait until it is gone.
		if err := p.deletePod(ctx, spec.ID, name, string(cur.UID)); err != nil {
			return "", err
		}
		if err := p.waitPod(ctx, spec.ID, name, string(cur.UID), podGone); err != nil {
			return "", err
		}
	}
}

// podSpec is the workspace's Pod.
func (p *Provider) podSpec(spec provider.Spec, image string) *corev1.Pod {
	env := []corev1.EnvVar{{Name: "HOME", Value: p.cfg.MountPath}, {Name: "GANTRY_WORKSPACE_ID", Value: spec.ID}, {Name: "PORT", Value: strconv.Itoa(ContainerPort)}}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	c := corev1.Container{
		Name: "workspace", Image: image, Env: env, WorkingDir: p.cfg.MountPath,
		Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: ContainerPort}},
		Resources:    p.resources(spec.Limits),
		VolumeMounts: []corev1.VolumeMount{{Name: "home", MountPath: p.cfg.MountPath, SubPath: "home"}},
	}
	if spec.Command != "" {
		c.Command = []string{"sh", "-c", spec.Command}
	}
	if spec.HTTP {
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(ContainerPort)}}, PeriodSeconds: 2}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(spec.ID), Namespace: p.cfg.Namespace, Labels: p.labels(spec.ID, RoleWorkspace)},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: new(false),
			EnableServiceLinks:           new(false),
			// The seed's stop is a SIGKILL; a Pod is given a short grace
			// instead of a force delete, which would let the next Pod mount
			// the claim while the old container may still run.
			TerminationGracePeriodSeconds: new(int64(stopGraceSeconds)),
			NodeSelector:                  p.cfg.NodeSelector,
			Containers:                    []corev1.Container{c},
			Volumes:                       []corev1.Volume{claimVolume("home", spec.ID)},
		},
	}
	pod.Annotations = map[string]string{}
	if spec.Name != "" {
		pod.Annotations[AnnotationName] = spec.Name
	}
	if spec.Owner != "" {
		// The owner is always in an annotation; in the label (for selectors)
		// only when it is a valid label value (an e-mail address is not).
		pod.Annotations[AnnotationOwner] = spec.Owner
		if validLabelValue(spec.Owner) {
			pod.Labels[LabelOwner] = spec.Owner
		}
	}
	return pod
}

func (p *Provider) labels(id, role string) map[string]string {
	return map[string]string{LabelWorkspaceID: id, LabelRole: role, LabelManagedBy: ManagedBy}
}

// validLabelValue: a label value is at most 63 characters of
// [A-Za-z0-9._-], starting and ending alphanumeric.
func validLabelValue(v string) bool {
	return len(validation.IsValidLabelValue(v)) == 0
}

func claimVolume(name, id string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(id)}}}
}

// resources are the workspace's limits (the configured ones where it sets
// none) as both requests and limits: the scheduler places the Pod by them,
// and the kubelet enforces them.
func (p *Provider) resources(l provider.Limits) corev1.ResourceRequirements {
	if l.CPUs == 0 {
		l.CPUs = p.cfg.CPUs
	}
	if l.Memory == 0 {
		l.Memory = p.cfg.Memory
	}
	rl := corev1.ResourceList{}
	if l.CPUs > 0 {
		rl[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(l.CPUs*1000+0.5), resource.DecimalSI)
	}
	if l.Memory > 0 {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(l.Memory, resource.BinarySI)
	}
	if len(rl) == 0 {
		return corev1.ResourceRequirements{}
	}
	return corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()}
}

// Stop deletes the workspace's Pod and its NetworkPolicy and keeps its
// claim. A missing Pod or policy is not an error. It returns once the
// deletions are accepted: Observe reports a terminating Pod as Stopped.
func (p *Provider) Stop(ctx context.Context, id string) error {
	defer p.lock(id)()
	if err := p.deletePod(ctx, id, PodName(id), ""); err != nil {
		return err
	}
	return p.deletePolicy(ctx, id)
}

// deletePod deletes a Pod (only the one with uid, if given).
func (p *Provider) deletePod(ctx context.Context, id, name, uid string) error {
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = metav1.NewUIDPreconditions(uid)
	}
	err := p.cli.CoreV1().Pods(p.cfg.Namespace).Delete(ctx, name, opts)
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) && uid != "" {
		return nil
	}
	return wrap("delete pod of", id, err)
}

// Observe reports Running when the workspace's Pod is Ready (the seed's
// is_running: the Ready condition, not phase Running), Stopped when it
// exists otherwise (pending, not ready, ended, terminating), Missing when
// there is none. It reads the informer's cache.
func (p *Provider) Observe(ctx context.Context, id string) (provider.ContainerState, error) {
	if err := p.w.waitSynced(ctx, syncWait); err != nil {
		return provider.Missing, wrap("observe", id, err)
	}
	pod, err := p.w.pod(PodName(id))
	if err != nil {
		return provider.Missing, wrap("observe", id, err)
	}
	switch {
	case pod == nil:
		return provider.Missing, nil
	case pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && isReady(pod):
		return provider.Running, nil
	}
	return provider.Stopped, nil
}
