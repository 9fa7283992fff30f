package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace/provider/fs"
)

// The tests run against the control plane scripts/services.d/kubernetes.sh starts on
// loopback: a real etcd, API server, scheduler and controller manager; kwok plays the
// nodes (no container runs). simKubelet below plays the one part of a kubelet the tests
// need bytes from: it runs the job Pods' `gantry ws volume` command on a directory that
// stands for the claim.

func servicesDir() string {
	if d := os.Getenv("GANTRY_SERVICES_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "gantry-services")
}

func kubePort() string {
	if p := os.Getenv("GANTRY_KUBE_PORT"); p != "" {
		return p
	}
	return "16443"
}

// kubeconfig starts the test cluster if it is not running and returns its admin kubeconfig.
func kubeconfig(t testing.TB) string {
	t.Helper()
	testutil.Ensure(t, "kubernetes", "127.0.0.1:"+kubePort())
	return filepath.Join(servicesDir(), "kubernetes", "kubeconfig")
}

// testCluster is one test's view of the cluster: its own namespace (deleted at the end),
// a client, the archive storage and the simulated kubelet for job Pods.
type testCluster struct {
	t      testing.TB
	rest   *rest.Config
	cli    kubernetes.Interface
	ns     string
	blobs  string // the archive storage's directory (file:// URL for the job Pods)
	claims string // simKubelet's directories standing for claims, by claim UID
	sim    *simKubelet
}

func newTestCluster(t testing.TB) *testCluster {
	t.Helper()
	rc, err := RESTConfig(kubeconfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return newTestClusterAt(t, rc)
}

func newTestClusterAt(t testing.TB, rc *rest.Config) *testCluster {
	t.Helper()
	cli, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	rand.Read(b[:])
	c := &testCluster{t: t, rest: rc, cli: cli, ns: "gantry-test-" + hex.EncodeToString(b[:]),
		blobs: filepath.Join(t.TempDir(), "blobs"), claims: filepath.Join(t.TempDir(), "claims")}
	ctx := t.Context()
	if _, err := cli.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.CoreV1().Namespaces().Delete(context.WithoutCancel(t.Context()), c.ns, metav1.DeleteOptions{})
	})
	// The service-account controller gives each namespace its "default" account;
	// pods cannot be admitted before it exists.
	testutil.WaitFor(t, 30*time.Second, "default service account", func() (bool, string) {
		_, err := cli.CoreV1().ServiceAccounts(c.ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	c.sim = startSimKubelet(t, cli, c.ns, c.claims)
	return c
}

// config is a provider configuration for this cluster's namespace.
func (c *testCluster) config() Config {
	return Config{Client: c.cli, REST: c.rest, Namespace: c.ns, StorageClass: "gantry-sim",
		Image: "registry.invalid/workspace:1", JobImage: "registry.invalid/gantry:1",
		Archives: &fs.BlobStore{Dir: c.blobs}, ArchiveURL: "file://" + c.blobs,
		StartupTimeout: time.Minute, JobTimeout: time.Minute,
		// A poll four times a second instead of every 5 s: the tests of a watch that is
		// behind wait for one or two.
		PollEvery: 250 * time.Millisecond}
}

func (c *testCluster) provider(cfg Config) *Provider {
	c.t.Helper()
	p, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { p.Close() })
	return p
}

// pods lists the namespace's Pods with the given labels.
func (c *testCluster) pods(sel map[string]string) []corev1.Pod {
	c.t.Helper()
	l, err := c.cli.CoreV1().Pods(c.ns).List(c.t.Context(), metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
	if err != nil {
		c.t.Fatal(err)
	}
	return l.Items
}

// claimDir is where simKubelet keeps the contents of workspace id's current claim.
func (c *testCluster) claimDir(id string) string {
	c.t.Helper()
	pvc, err := c.cli.CoreV1().PersistentVolumeClaims(c.ns).Get(c.t.Context(), ClaimName(id), metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return filepath.Join(c.claims, string(pvc.UID))
}

// addNodes creates n fake nodes (kwok manages every node) and removes them at the end.
func (c *testCluster) addNodes(prefix string, n int, cpu, mem string) []string {
	c.t.Helper()
	ctx := c.t.Context()
	var names []string
	for i := 0; i < n; i++ {
		rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourcePods: resource.MustParse("110")}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", prefix, c.ns, i), Labels: map[string]string{"type": "kwok", "gantry-test": c.ns}},
			Status: corev1.NodeStatus{Allocatable: rl, Capacity: rl}}
		if _, err := c.cli.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			c.t.Fatal(err)
		}
		names = append(names, node.Name)
		c.t.Cleanup(func() {
			_ = c.cli.CoreV1().Nodes().Delete(context.WithoutCancel(c.t.Context()), node.Name, metav1.DeleteOptions{})
		})
	}
	testutil.WaitFor(c.t, 60*time.Second, "nodes ready", func() (bool, string) {
		for _, name := range names {
			node, err := c.cli.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !nodeReady(node) || len(node.Spec.Taints) > 0 {
				return false, name + " not ready, or still tainted (the node controller lifts not-ready taints)"
			}
		}
		return true, ""
	})
	return names
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// simKubelet runs the job Pods (roles archive and restore) that kwok marks Running: it
// parses their arguments as the gantry binary would, runs the VolumeJob on the claim's
// directory, and reports the Pod Succeeded or Failed (exit status, termination message)
// as a kubelet does. Every job Pod it saw is recorded.
type simKubelet struct {
	ctx    context.Context // the test's: it ends with the test
	cli    kubernetes.Interface
	ns     string
	claims string

	mu   sync.Mutex
	done map[string]bool // Pod UID → handled
	seen []string        // Pod names, in order
}

func startSimKubelet(t testing.TB, cli kubernetes.Interface, ns, claims string) *simKubelet {
	s := &simKubelet{ctx: t.Context(), cli: cli, ns: ns, claims: claims, done: map[string]bool{}}
	sel, _ := labels.Parse(LabelRole + " in (" + RoleArchive + "," + RoleRestore + ")")
	f := informers.NewSharedInformerFactoryWithOptions(cli, time.Minute, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }))
	inf := f.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.handle(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { s.handle(obj.(*corev1.Pod)) },
	})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go inf.Run(stop)
	return s
}

func (s *simKubelet) handle(pod *corev1.Pod) {
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		return
	}
	s.mu.Lock()
	if s.done[string(pod.UID)] {
		s.mu.Unlock()
		return
	}
	s.done[string(pod.UID)] = true
	s.seen = append(s.seen, pod.Name)
	s.mu.Unlock()
	go s.run(pod.DeepCopy())
}

func (s *simKubelet) run(pod *corev1.Pod) {
	ctx := s.ctx
	code, msg := 0, ""
	if err := s.job(ctx, pod); err != nil {
		code, msg = ExitStatus(err)
	}
	now := metav1.Now()
	pod.Status.Phase = corev1.PodSucceeded
	if code != 0 {
		pod.Status.Phase = corev1.PodFailed
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "job", Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), Message: msg, FinishedAt: now, StartedAt: now}}}}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady || pod.Status.Conditions[i].Type == corev1.ContainersReady {
			pod.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	_, _ = s.cli.CoreV1().Pods(s.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
}

// job runs the Pod's command: `gantry ws volume <op> --storage file://DIR --key K --dir
// /volume/home`, with /volume standing for the claim's directory.
func (s *simKubelet) job(ctx context.Context, pod *corev1.Pod) error {
	args := pod.Spec.Containers[0].Args
	if len(args) < 3 || args[0] != "ws" || args[1] != "volume" {
		return fmt.Errorf("simKubelet: pod %s: unexpected command %q", pod.Name, args)
	}
	j, err := ParseVolumeJob(args[2:])
	if err != nil {
		return err
	}
	claim := pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	pvc, err := s.cli.CoreV1().PersistentVolumeClaims(s.ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return err
	}
	rel, ok := strings.CutPrefix(j.Dir, VolumeMount)
	if !ok {
		return fmt.Errorf("simKubelet: --dir %s is not on the claim's mount %s", j.Dir, VolumeMount)
	}
	j.Dir = filepath.Join(s.claims, string(pvc.UID), rel)
	dir, ok := strings.CutPrefix(j.Storage, "file://")
	if !ok {
		return fmt.Errorf("simKubelet: --storage %s: want file://", j.Storage)
	}
	return j.Run(ctx, &fs.BlobStore{Dir: dir})
}

// jobPods are the job Pods simKubelet ran, in order.
func (s *simKubelet) jobPods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
