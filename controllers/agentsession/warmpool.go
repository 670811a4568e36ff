package agentsession

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/k8senv"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// LabelWarmPool marks an unclaimed warm-pool pod; its value is the pool's key
// (a hash of the pod spec the pool serves). Claiming a pod replaces its labels
// with the session's, so the label never sits on a pod a session owns.
const LabelWarmPool = "agent-operator.dev/warm-pool"

// poolMissingNamespaceRetry is how soon a pool whose namespace does not exist
// (yet) is looked at again.
const poolMissingNamespaceRetry = 10 * time.Second

// spareRecheck is how often a pool with spare streams is looked at without
// a change of its pods: a spare that ended on its own (the kubelet closes
// an exec idle for its streamingConnectionIdleTimeout, 4 h by default; the
// executor was killed) is opened again then, so a claim pays the full
// stream open for at most this long.
const spareRecheck = 10 * time.Minute

// WarmPool is one pool of pre-started workspace pods.
type WarmPool struct {
	// Namespace the pods run in; only sessions of this namespace claim them
	// (an ownerReference cannot cross namespaces).
	Namespace string
	// Size is the number of unclaimed pods the pool keeps.
	Size int
	// Image is the workspace image of the pool's pods (empty: the default).
	Image string
}

// ParseWarmPools parses the manager's --warm-pool values, each
// NAMESPACE=SIZE or NAMESPACE=SIZE:IMAGE.
func ParseWarmPools(values []string) ([]WarmPool, error) {
	var pools []WarmPool
	for _, v := range values {
		ns, rest, ok := strings.Cut(v, "=")
		if !ok || ns == "" || rest == "" {
			return nil, fmt.Errorf("warm pool %q: want NAMESPACE=SIZE or NAMESPACE=SIZE:IMAGE", v)
		}
		sizeText, image, _ := strings.Cut(rest, ":")
		size, err := strconv.Atoi(sizeText)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("warm pool %q: size %q is not a non-negative integer", v, sizeText)
		}
		pools = append(pools, WarmPool{Namespace: ns, Size: size, Image: image})
	}
	return pools, nil
}

// pool is a configured pool with the pod template it serves.
type pool struct {
	WarmPool
	key  string
	spec corev1.PodSpec
}

// pools holds the configured pools and the claims made by this process.
type pools struct {
	byKey map[types.NamespacedName]*pool // {namespace, key}
	// claimed remembers session UID -> pod name for claims whose pod update
	// the cache may not show yet, so a reconcile never creates a second pod.
	claimed sync.Map
}

func newPools(cfg []WarmPool, img Images) (*pools, error) {
	p := &pools{byKey: map[types.NamespacedName]*pool{}}
	for _, c := range cfg {
		template := buildPod(&agentsv1.AgentSession{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace},
			Spec:       agentsv1.AgentSessionSpec{Workspace: agentsv1.WorkspaceSpec{Image: c.Image}},
		}, img)
		key, err := specKey(template.Spec)
		if err != nil {
			return nil, err
		}
		id := types.NamespacedName{Namespace: c.Namespace, Name: key}
		if _, dup := p.byKey[id]; dup {
			return nil, fmt.Errorf("warm pool %s: configured twice", c.Namespace)
		}
		p.byKey[id] = &pool{WarmPool: c, key: key, spec: template.Spec}
	}
	return p, nil
}

// specKey is a short, stable hash of a pod spec: pods of a pool whose images
// or template changed no longer match and are replaced.
func specKey(spec corev1.PodSpec) (string, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("hash pod spec: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], nil
}

// forSession returns the pool whose pods are exactly what s would get, or nil.
func (p *pools) forSession(s *agentsv1.AgentSession, img Images) *pool {
	if p == nil || len(p.byKey) == 0 || sharedWorkspace(s) || buildPVC(s) != nil {
		return nil
	}
	want := buildPod(s, img).Spec
	for id, pl := range p.byKey {
		if id.Namespace == s.Namespace && pl.Size > 0 && equality.Semantic.DeepEqual(want, pl.spec) {
			return pl
		}
	}
	return nil
}

// claimPod takes a ready pod from the pool that serves s, if there is one:
// an update with the pod's resourceVersion replaces the pool label with the
// session's labels and adds the session as controller, so of two sessions
// racing for one pod exactly one wins (the other gets a conflict and tries
// the next pod). It returns nil when no pod could be claimed: the caller
// starts cold.
func (r *Reconciler) claimPod(ctx context.Context, s *agentsv1.AgentSession) (*corev1.Pod, error) {
	pl := r.pools.forSession(s, r.Images)
	if pl == nil {
		return nil, nil
	}
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{LabelWarmPool: pl.key}); err != nil {
		return nil, fmt.Errorf("list warm pool: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range list.Items {
		pod := &list.Items[i]
		if !podReady(pod) || metav1.GetControllerOf(pod) != nil {
			continue
		}
		pod.Labels = sessionLabels(s)
		if err := ctrl.SetControllerReference(s, pod, r.Scheme); err != nil {
			return nil, fmt.Errorf("own pod: %w", err)
		}
		if err := r.Client.Update(ctx, pod); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue // another session took it, or it went away
			}
			return nil, fmt.Errorf("claim warm pod %s: %w", pod.Name, err)
		}
		r.pools.claimed.Store(s.UID, pod.Name)
		if r.WarmStreams != nil {
			r.WarmStreams.Claimed(pod)
		}
		if r.Metrics != nil {
			r.Metrics.WarmPoolClaim(s.Namespace, true)
		}
		ctrl.LoggerFrom(ctx).Info("Claimed warm workspace pod", "pod", klog.KObj(pod))
		r.Recorder.Eventf(s, pod, corev1.EventTypeNormal, agentsv1.ReasonPodCreated, "ClaimPod", "Claimed warm workspace pod %s", pod.Name)
		return pod, nil
	}
	if r.Metrics != nil {
		r.Metrics.WarmPoolClaim(s.Namespace, false)
	}
	return nil, nil
}

// claimedPod finds a pod claimed from a pool by the session with UID
// ownerUID: this process's record first (the cache may lag), then the
// session's UID label.
func (r *Reconciler) claimedPod(ctx context.Context, namespace string, ownerUID types.UID) (*corev1.Pod, error) {
	if r.pools == nil {
		return nil, nil
	}
	if name, ok := r.pools.claimed.Load(ownerUID); ok {
		pod := &corev1.Pod{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name.(string)}, pod)
		if err == nil {
			return pod, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("get claimed pod: %w", err)
		}
	}
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{agentsv1.LabelSessionUID: string(ownerUID)}); err != nil {
		return nil, fmt.Errorf("list claimed pods: %w", err)
	}
	for i := range list.Items {
		if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.UID == ownerUID {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// serves reports whether a pool is configured in namespace: only there are
// pool pods of other (outdated) keys deleted.
func (p *pools) serves(namespace string) bool {
	for id := range p.byKey {
		if id.Namespace == namespace {
			return true
		}
	}
	return false
}

// forget drops the claim record of a session that is gone.
func (p *pools) forget(uid types.UID) {
	if p != nil {
		p.claimed.Delete(uid)
	}
}

// PoolReconciler keeps every warm pool at its size: it creates missing pods,
// deletes surplus and failed ones, and in namespaces that have a pool it
// deletes pool pods of outdated templates (images changed). Pods of a pool are reconciled
// when one of them changes (a claim removes the pool label, which counts as a
// change), once at start, and every spareRecheck while it keeps spare
// streams.
type PoolReconciler struct {
	Client  client.Client
	pools   *pools
	start   chan event.TypedGenericEvent[*corev1.Pod]
	metrics MetricsRecorder // nil: none
	// Streams, if set, keeps a spare executor stream open to every ready
	// pool pod, which the session that claims the pod adopts instead of
	// opening one (k8senv.Pool.Preopen), and looks at the pool every
	// spareRecheck to reopen spares that ended; nil: no spares.
	Streams streamPreopener
	// RefillDelay is how long a pool found short of pods waits before it
	// creates them (DefaultRefillDelay when zero; negative: no wait).
	RefillDelay time.Duration

	mu         sync.Mutex
	shortSince map[types.NamespacedName]time.Time // when each short pool was first seen short
}

// DefaultRefillDelay is the default of PoolReconciler.RefillDelay. A claim
// makes its pool short at once, while the claimed pod's session starts: a
// replacement created then (its scheduling, the container's start, its
// postStart baseline, its spare stream) takes the CPU that start needs on a
// small cluster. A second later the start is done (docs/design.md, "Warm
// start").
const DefaultRefillDelay = time.Second

// refillWait returns how long the short pool key still waits before it is
// refilled: the delay from when it was first seen short, 0 when that has
// passed.
func (p *PoolReconciler) refillWait(key types.NamespacedName, now time.Time) time.Duration {
	delay := p.RefillDelay
	if delay == 0 {
		delay = DefaultRefillDelay
	}
	if delay < 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	since, ok := p.shortSince[key]
	if !ok {
		if p.shortSince == nil {
			p.shortSince = map[types.NamespacedName]time.Time{}
		}
		p.shortSince[key], since = now, now
	}
	return max(0, delay-now.Sub(since))
}

// full forgets that the pool key was short.
func (p *PoolReconciler) full(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.shortSince, key)
}

// streamPreopener keeps spare executor streams to pool pods
// (*k8senv.Pool).
type streamPreopener interface {
	// Preopen opens the spare stream of t's pod unless it has one.
	Preopen(ctx context.Context, t k8senv.Target) error
	// DropSpare closes the spare stream of a pod, if any.
	DropSpare(namespace, pod string)
	// Claimed hands the pod, as its claim's update returned it, to the
	// pod's spare: its take-over checks that copy instead of reading the
	// pod again.
	Claimed(pod *corev1.Pod)
}

var _ streamPreopener = (*k8senv.Pool)(nil)

// preopenTimeout bounds opening one spare stream.
const preopenTimeout = 30 * time.Second

// preopen starts opening the spare stream of a ready pool pod in the
// background (the pool pod's labels are checked before it opens); it does
// nothing for a pod that has one. A failure is logged; the pod's next
// change tries again.
func (p *PoolReconciler) preopen(ctx context.Context, pod *corev1.Pod, key string) {
	target := k8senv.Target{
		Namespace: pod.Namespace,
		Pod:       pod.Name,
		Container: runner.WorkspaceContainer,
		Expect:    k8senv.Expect{Labels: map[string]string{LabelWarmPool: key}},
	}
	log := ctrl.LoggerFrom(ctx)
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), preopenTimeout)
		defer cancel()
		if err := p.Streams.Preopen(ctx, target); err != nil {
			log.V(1).Info("Could not open a spare executor stream to a warm pod", "pod", klog.KObj(pod), "error", err.Error())
		}
	}()
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;update;delete

// Reconcile brings the pool named by req ({namespace, key}) to its size.
func (p *PoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var list corev1.PodList
	if err := p.Client.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingLabels{LabelWarmPool: req.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list warm pool: %w", err)
	}
	pl := p.pools.byKey[req.NamespacedName]
	if pl == nil && !p.pools.serves(req.Namespace) {
		return ctrl.Result{}, nil // not ours to manage
	}
	size := 0
	if pl != nil {
		size = pl.Size
	}
	var keep []*corev1.Pod
	var errs []error
	for i := range list.Items {
		pod := &list.Items[i]
		switch {
		case pod.DeletionTimestamp != nil:
			p.dropSpare(pod)
		case podGone(pod) || len(keep) >= size:
			p.dropSpare(pod)
			errs = append(errs, client.IgnoreNotFound(p.Client.Delete(ctx, pod)))
		default:
			keep = append(keep, pod)
			if p.Streams != nil && podReady(pod) && metav1.GetControllerOf(pod) == nil {
				p.preopen(ctx, pod, req.Name)
			}
		}
	}
	if p.metrics != nil && pl != nil {
		p.metrics.SetWarmPoolPods(pl.Namespace, len(keep)) // ready or starting, unclaimed
	}
	var res ctrl.Result
	if p.Streams != nil && len(keep) > 0 {
		res.RequeueAfter = spareRecheck // reopen spares that ended without a pod change
	}
	if pl == nil || len(keep) >= size {
		p.full(req.NamespacedName)
		return res, errors.Join(errs...)
	}
	if wait := p.refillWait(req.NamespacedName, time.Now()); wait > 0 {
		res.RequeueAfter = wait // shorter than spareRecheck
		return res, errors.Join(errs...)
	}
	p.full(req.NamespacedName)
	for n := len(keep); n < size; n++ {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: "warm-" + pl.key[:8] + "-",
				Namespace:    pl.Namespace,
				Labels: map[string]string{
					LabelWarmPool:                 pl.key,
					labelManagedBy:                managedBy,
					"app.kubernetes.io/component": "warm-pool",
				},
			},
			Spec: *pl.spec.DeepCopy(),
		}
		if err := p.Client.Create(ctx, pod); err != nil {
			if apierrors.IsNotFound(err) { // the namespace does not exist (yet)
				return ctrl.Result{RequeueAfter: poolMissingNamespaceRetry}, nil
			}
			errs = append(errs, fmt.Errorf("create warm pod: %w", err))
			break
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Created warm workspace pod", "pod", klog.KObj(pod))
	}
	return res, errors.Join(errs...)
}

// dropSpare closes the spare stream of a pool pod that goes away.
func (p *PoolReconciler) dropSpare(pod *corev1.Pod) {
	if p.Streams != nil {
		p.Streams.DropSpare(pod.Namespace, pod.Name)
	}
}

// SetupWithManager registers the pool controller. It watches pods that carry
// the pool label before or after a change.
func (p *PoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	pooled := func(o client.Object) bool { _, ok := o.GetLabels()[LabelWarmPool]; return ok }
	toPool := func(_ context.Context, pod *corev1.Pod) []reconcile.Request {
		key, ok := pod.Labels[LabelWarmPool]
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: key}}}
	}
	p.start = make(chan event.TypedGenericEvent[*corev1.Pod], len(p.pools.byKey))
	for id := range p.pools.byKey {
		p.start <- event.TypedGenericEvent[*corev1.Pod]{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: id.Namespace, Labels: map[string]string{LabelWarmPool: id.Name},
		}}}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("warmpool").
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			pod, ok := o.(*corev1.Pod)
			if !ok {
				return nil
			}
			return toPool(ctx, pod)
		}), builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(e event.CreateEvent) bool { return pooled(e.Object) },
			DeleteFunc:  func(e event.DeleteEvent) bool { return pooled(e.Object) },
			UpdateFunc:  func(e event.UpdateEvent) bool { return pooled(e.ObjectOld) || pooled(e.ObjectNew) },
			GenericFunc: func(e event.GenericEvent) bool { return pooled(e.Object) },
		})).
		WatchesRawSource(source.Channel(p.start, handler.TypedEnqueueRequestsFromMapFunc(toPool))).
		Complete(p)
}
