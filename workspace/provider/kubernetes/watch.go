package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// watcher keeps the namespace's gantry Pods in an informer's cache (one
// list, then one watch that client-go resumes after a lost connection or an
// API server restart, re-listing when its resource version expired), wakes
// whoever waits for a Pod's change, and hands workspace ids to OnChange.
type watcher struct {
	inf    cache.SharedIndexInformer
	lister corelisters.PodLister
	ns     string
	done   chan struct{}
	once   sync.Once

	mu       sync.Mutex
	waits    map[string]chan struct{} // Pod name → closed at its next change
	onChange func(id string)
}

func newWatcher(cli kubernetes.Interface, ns string, resync time.Duration, log *slog.Logger) *watcher {
	sel := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy}).String()
	f := informers.NewSharedInformerFactoryWithOptions(cli, resync, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	pods := f.Core().V1().Pods()
	w := &watcher{inf: pods.Informer(), lister: pods.Lister(), ns: ns, done: make(chan struct{}), waits: map[string]chan struct{}{}}
	_, _ = w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.changed,
		UpdateFunc: func(_, obj any) { w.changed(obj) },
		DeleteFunc: w.changed,
	})
	_ = w.inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		log.Warn("kubernetes: pod watch interrupted; resuming", "namespace", ns, "err", err)
	})
	go w.inf.Run(w.done)
	return w
}

func (w *watcher) stop() { w.once.Do(func() { close(w.done) }) }

func (w *watcher) setOnChange(f func(id string)) {
	w.mu.Lock()
	w.onChange = f
	w.mu.Unlock()
}

// changed wakes the waiters of obj's Pod and reports a workspace Pod's id.
func (w *watcher) changed(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	if ch, ok := w.waits[pod.Name]; ok {
		close(ch)
		delete(w.waits, pod.Name)
	}
	f := w.onChange
	w.mu.Unlock()
	if f != nil && pod.Labels[LabelRole] == RoleWorkspace {
		f(pod.Labels[LabelWorkspaceID])
	}
}

// next is closed at the next change of Pod name. Take it before reading
// the cache, so that no change between the read and the wait is missed.
func (w *watcher) next(name string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.waits[name]
	if !ok {
		ch = make(chan struct{})
		w.waits[name] = ch
	}
	return ch
}

// errNotSynced: the informer has not listed the Pods yet (the API server
// is not answering); wrap makes it ErrUnreachable.
var errNotSynced = errors.New("the pod cache has not synced with the API server yet")

// pod is Pod name from the cache; nil if there is none.
func (w *watcher) pod(name string) (*corev1.Pod, error) {
	if !w.inf.HasSynced() {
		return nil, errNotSynced
	}
	pod, err := w.lister.Pods(w.ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pod, err
}

// syncWait bounds how long a call waits for the first list of the Pods
// before it fails as unreachable (the API server is not answering).
const syncWait = 10 * time.Second

// waitSynced waits until the cache has listed the Pods once, at most d.
func (w *watcher) waitSynced(ctx context.Context, d time.Duration) error {
	if w.inf.HasSynced() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced) {
		return errNotSynced
	}
	return nil
}

// podCond judges Pod uid's cached state (nil: not in the cache): done ends
// the wait, with err nil if the Pod is where the caller wants it.
type podCond func(pod *corev1.Pod, uid string) (done bool, err error)

// waitPod waits until cond holds for Pod name (uid: the Pod the caller
// made, which existed when it asked), re-reading the cache at each of its
// changes. Every Config.PollEvery without one it reads the Pod from the API server
// instead: the watch under the cache may be behind (after an API server
// restart client-go resumes it with a backoff), and a Pod deleted outright
// (no terminating state seen) is not in the cache either way; then it fails
// with errDeletedWhileStarting, which Start answers with a new Pod.
func (p *Provider) waitPod(ctx context.Context, id, name, uid string, cond podCond) error {
	if err := p.w.waitSynced(ctx, syncWait); err != nil {
		return wrap("wait for pod of", id, err)
	}
	var last *corev1.Pod
	live := false
	for {
		ch := p.w.next(name)
		pod, err := p.w.pod(name)
		answered := false
		if live {
			pod, err, answered = p.livePod(ctx, name, pod, err)
		}
		if err != nil {
			return wrap("wait for pod of", id, err)
		}
		last = pod
		if done, err := cond(pod, uid); done {
			return err
		}
		if answered && (pod == nil || string(pod.UID) != uid) {
			// The API server itself no longer has the Pod this call made
			// (deleted outright, perhaps replaced): waiting on would only
			// end at the deadline.
			return fmt.Errorf("%w: pod %s (uid %s) is gone from the API server", errDeletedWhileStarting, name, uid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubernetes: workspace %s: pod %s: %s: %w", id, name, describe(last), ctx.Err())
		case <-ch:
			live = false
		case <-time.After(p.cfg.PollEvery):
			live = true
		}
	}
}

// liveReadTimeout bounds one read of a Pod from the API server by waitPod.
const liveReadTimeout = 10 * time.Second

// livePod is Pod name as the API server has it (nil: none), answered
// true; cached and cacheErr are the cache's answer, kept (answered false)
// when the API server does not answer: the wait goes on, its own deadline
// bounds it, and a Pod is never judged gone on the cache's word alone.
func (p *Provider) livePod(ctx context.Context, name string, cached *corev1.Pod, cacheErr error) (pod *corev1.Pod, err error, answered bool) {
	// A read that hangs (a connection to an API server that went away
	// without a word) must not hold the wait past its next turn.
	ctx, cancel := context.WithTimeout(ctx, liveReadTimeout)
	defer cancel()
	pod, err = p.cli.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		pod = nil
	case err != nil:
		return cached, cacheErr, false
	}
	if (pod == nil) != (cached == nil) || pod != nil && pod.ResourceVersion != cached.ResourceVersion {
		p.cfg.Logger.Warn("kubernetes: pod cache behind the API server; judging the live pod", "pod", name)
	}
	return pod, nil, true
}
