package agentsession

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// SessionRunner is what the reconciler needs from the runner (*runner.Runner).
type SessionRunner interface {
	Ensure(s *agentsv1.AgentSession, pod string) error
	Progress(uid types.UID) (runner.Progress, bool)
	Running(uid types.UID) bool
	Abort(uid types.UID)
	Suspend(uid types.UID)
	Forget(uid types.UID)
}

// stopPoll is how soon a reconcile waiting for a runner to stop looks again
// (the runner also notifies when it ends).
const stopPoll = time.Second

// Reconciler reconciles AgentSessions: the workspace pod, the runner, status
// and the finalizer.
type Reconciler struct {
	Client client.Client
	// APIReader reads from the API server where the cache may lag or not
	// hold the object (default: Client).
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Runner    SessionRunner
	Images    Images
	// EventsPrefix is the first subject token of the events stream (default "agents").
	EventsPrefix string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// MaxSessionsPerNamespace bounds the concurrent top-level sessions of a
	// namespace (0: unlimited; see quota.go).
	MaxSessionsPerNamespace int
	// WarmPools are the pools of pre-started workspace pods that sessions
	// claim instead of starting a pod cold (none by default).
	WarmPools []WarmPool
	// WarmStreams, if set, keeps a spare executor stream open to every
	// ready warm pool pod for the session that claims it (nil: none).
	WarmStreams streamPreopener
	// Claims, when set, is read before anything is done for a session: one
	// that another operator instance holds a live claim on is left alone
	// (the runner acquires and keeps the claims).
	Claims *claim.Claims
	// Class is the sessions this install handles: those whose
	// agentsv1.LabelClass equals it ("" handles the unlabelled ones).
	Class string
	// ReportUnservedAfter is how long a session of another class may stay
	// without a phase (no install took it up) before this install reports it
	// Accepted=False/ClassNotServed (see unserved.go); 0 never reports.
	ReportUnservedAfter time.Duration
	// MaxConcurrentReconciles is how many sessions are reconciled at once
	// (0: controller-runtime's default, 1). A session is never reconciled by
	// two workers at once; across sessions the quota orders sessions by
	// creation and warm pod claims are optimistic, so both hold with more.
	MaxConcurrentReconciles int
	// AdmissionWorkers is how many new sessions get their first status at
	// once, by a controller of their own (admission.go); 0: only the main
	// controller writes first statuses.
	AdmissionWorkers int
	// Metrics, if set, records ended sessions and the warm pools.
	Metrics MetricsRecorder
	// Shard, when set, shards the sessions among the install's replicas
	// (--shard-sessions, see shard.go): this replica acts only for the
	// sessions the ring prefers it for or that it already drives, and the
	// controller runs on every replica (no leader election). It needs Claims,
	// with Sharded set, so that no replica takes another's live claim.
	Shard ShardRing
	// StatusInterval is how often, at most, a session's progress-only status
	// changes (counters, tokens, cost, result, plan, status.children and
	// the tree figures) are written; phase and condition changes and a session's end
	// are written at once, the end in one write once its runner ended (see
	// statuswrites.go). 0 writes every change at once.
	StatusInterval time.Duration

	pools *pools

	// writes remembers each session's last status write (StatusInterval).
	writes statusWrites

	// foreign remembers the last foreign holder announced per session (by
	// name, so the reconcile of a deleted session forgets it; the UID tells
	// a new session of the same name), so the OwnedElsewhere Event is
	// recorded once per holder. An entry goes when the session is deleted
	// or found held by no other instance.
	foreignMu sync.Mutex
	foreign   map[types.NamespacedName]foreignHolder

	updates chan event.TypedGenericEvent[*agentsv1.AgentSession]

	// childrenIndexed: Client reads from the manager's cache, which indexes
	// sessions by their parent's UID (childrenField; SetupWithManager).
	childrenIndexed bool
}

// childrenField is the manager cache's index of sessions by their parent's
// UID (the label agentsv1.LabelParentUID). Listing a session's children by
// it touches only those children; a label selector matches every session of
// the namespace, and every session's reconcile lists its children, so a
// fan-out of n children cost n x n label matches.
const childrenField = "agent-operator.dev/parent-uid"

// parentUIDOf is childrenField's value of a session: its parent's UID.
func parentUIDOf(o client.Object) []string {
	if uid := o.GetLabels()[agentsv1.LabelParentUID]; uid != "" {
		return []string{uid}
	}
	return nil
}

// Notify is the runner's notifier: it enqueues the session without blocking.
func (r *Reconciler) Notify(key types.NamespacedName) {
	ev := event.TypedGenericEvent[*agentsv1.AgentSession]{Object: &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
	}}
	select {
	case r.updates <- ev:
	default:
		go func() { r.updates <- ev }() // never drop a notification
	}
}

// NewReconciler returns a Reconciler whose Notify can be passed to the runner
// before SetupWithManager.
func NewReconciler() *Reconciler {
	return &Reconciler{updates: make(chan event.TypedGenericEvent[*agentsv1.AgentSession], 1024)}
}

// SetupWithManager registers the controller: AgentSessions, their pods
// (label-filtered) and runner progress through a channel source.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	switch {
	case r.Client == nil || r.Scheme == nil || r.Runner == nil || r.Recorder == nil:
		return errors.New("setup agentsession controller: client, scheme, runner and recorder are required")
	case r.Images.Executor == "" || r.Images.Workspace == "":
		return errors.New("setup agentsession controller: executor and workspace images are required")
	case r.updates == nil:
		return errors.New("setup agentsession controller: create the reconciler with NewReconciler")
	case r.Shard != nil && (r.Claims == nil || !r.Claims.Sharded):
		return errors.New("setup agentsession controller: sharding needs sharded claims")
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.EventsPrefix == "" {
		r.EventsPrefix = "agents"
	}
	pools, err := newPools(r.WarmPools, r.Images)
	if err != nil {
		return fmt.Errorf("setup agentsession controller: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &agentsv1.AgentSession{}, childrenField, parentUIDOf); err != nil {
		return fmt.Errorf("setup agentsession controller: index children: %w", err)
	}
	r.childrenIndexed = true // Client is the manager's: its reads are the cache's
	r.pools = pools
	if len(r.WarmPools) > 0 {
		pr := &PoolReconciler{Client: r.Client, pools: pools, metrics: r.Metrics, Streams: r.WarmStreams}
		if err := pr.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setup warm pool controller: %w", err)
		}
	}
	managed, err := predicate.LabelSelectorPredicate(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: agentsv1.LabelSession, Operator: metav1.LabelSelectorOpExists},
	}})
	if err != nil {
		return fmt.Errorf("setup agentsession controller: %w", err)
	}
	if r.AdmissionWorkers > 0 {
		if err := (admission{r: r}).setup(mgr, r.AdmissionWorkers); err != nil {
			return fmt.Errorf("setup admission controller: %w", err)
		}
	}
	ofClass := predicate.NewPredicateFuncs(r.watched)
	b := ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1.AgentSession{}, builder.WithPredicates(ofClass))
	if r.AdmissionWorkers == 0 {
		// This controller writes first statuses: a session without a phase
		// goes ahead of the work under way (firstpriority.go).
		b = b.WatchesRawSource(source.Kind(mgr.GetCache(), &agentsv1.AgentSession{}, firstStatusHandler(),
			predicate.NewTypedPredicateFuncs(func(s *agentsv1.AgentSession) bool { return r.watched(s) })))
	}
	return b.
		Owns(&corev1.Pod{}, builder.WithPredicates(managed)).
		// A workspace policy deleted or changed is restored (keepNetworkPolicy).
		Owns(&networkingv1.NetworkPolicy{}, builder.WithPredicates(managed)).
		// Children in the owner's workspace pod stop with it while it is not
		// in place (ownerConfined).
		Watches(&networkingv1.NetworkPolicy{}, handler.EnqueueRequestsFromMapFunc(r.workspaceSharers), builder.WithPredicates(managed)).
		// Children wake their parent (status.children): at once on a phase
		// change, within StatusInterval for their tree figures (parentwake.go).
		WatchesRawSource(source.Kind(mgr.GetCache(), &agentsv1.AgentSession{}, parentWakeHandler(r.StatusInterval))).
		WatchesRawSource(source.Channel(r.updates, &handler.TypedEnqueueRequestForObject[*agentsv1.AgentSession]{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles,
			// Sharded, every replica drives its share; else only the leader drives.
			NeedLeaderElection: ptr.To(r.Shard == nil)}).
		Named("agentsession").
		Complete(r)
}

// +kubebuilder:rbac:groups=agent-operator.dev,resources=agentsessions,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=agent-operator.dev,resources=agentsessions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agent-operator.dev,resources=agentsessions/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;patch;delete
// pods/exec, secrets and leases are not in the manager's ClusterRole: the chart grants them in
// the namespaces it serves and the release namespace (charts/agent-operator/templates/rbac-*.yaml).
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=services,verbs=get
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconcile reads the session, decides and applies: finalizer, workspace pod,
// runner, then one status patch.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &agentsv1.AgentSession{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		if apierrors.IsNotFound(err) {
			r.writes.forget(req.NamespacedName)
			r.forgetForeign(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.Labels[agentsv1.LabelClass] != r.Class {
		return r.reportUnserved(ctx, s) // another install's session (its class)
	}
	if ok, err := r.drives(ctx, s); !ok {
		return notDriven(ctx, err), nil // another replica's session
	}
	if res, foreign := r.heldElsewhere(ctx, s); foreign {
		return res, nil
	}
	if !s.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s)
	}
	if s.Status.Phase == "" {
		if r.AdmissionWorkers > 0 {
			// The admission controller writes it (admission.go), after the
			// same checks as above; its write wakes this one.
			return ctrl.Result{}, nil
		}
		return r.firstStatus(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(s, agentsv1.Finalizer) {
		base := s.DeepCopy()
		controllerutil.AddFinalizer(s, agentsv1.Finalizer)
		if err := r.Client.Patch(ctx, s, lockedMergeFrom(base)); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{Requeue: true}, nil // a stale cache: read again
			}
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}

	base := s.DeepCopy()
	obs, res, err := r.act(ctx, s)
	obs.progress = r.progress(s.UID)
	children, cerr := r.children(ctx, s)
	err = errors.Join(err, cerr)
	obs.children, obs.childSummary = children.listed, children.summary
	now := metav1.NewTime(r.Now())
	s.Status = computeStatus(s, obs, now)
	if err == nil && obs.confineErr == nil {
		s.Status.ObservedGeneration = s.Generation
	}
	var deferred ctrl.Result
	switch {
	case sameStatus(&base.Status, &s.Status):
		// Nothing the API server would store differently: no write.
	case endHeld(&base.Status, &s.Status, obs.progress):
		// The session's end is one write: the runner is still ending
		// (recording the change, releasing its claim) and notifies when it
		// has; that reconcile writes the final phase with all it knew.
		s.Status = base.Status
		deferred = ctrl.Result{RequeueAfter: stopPoll}
	default:
		wait := time.Duration(0)
		if p := obs.progress; p == nil || !p.Done { // an ended runner's last word is written before Forget
			wait = r.writes.wait(req.NamespacedName, &base.Status, &s.Status, now.Time, r.StatusInterval)
		}
		if wait > 0 {
			// Progress only, written recently: not now. The runner keeps
			// its progress, so the reconcile after wait writes what it
			// knows then. Status stays as read, for what follows.
			s.Status = base.Status
			deferred = ctrl.Result{RequeueAfter: wait, Priority: ptr.To(handler.LowPriority)}
		} else {
			// A merge patch of the status subresource with the resourceVersion
			// read: the controller is the only writer of status, and a reconcile
			// that read a stale copy gets a conflict instead of overwriting newer
			// state (conditions are replaced as a whole).
			if perr := r.Client.Status().Patch(ctx, s, lockedMergeFrom(base)); perr != nil {
				if apierrors.IsConflict(perr) && err == nil {
					return ctrl.Result{Requeue: true}, nil
				}
				return ctrl.Result{}, errors.Join(err, fmt.Errorf("patch status: %w", perr))
			}
			r.writes.wrote(req.NamespacedName, &s.Status, now.Time)
		}
	}
	res = lowestResult(res, deferred)
	r.recordTransition(base, s)
	if p := obs.progress; p != nil && p.Done {
		// Status now holds what the ended runner knew: forget it. A message
		// it did not take (it went idle meanwhile) starts a new one.
		r.Runner.Forget(s.UID)
		// Look again at once when the session still needs a runner: it is running
		// (the ended runner was suspended or lost its claim) or a message waits.
		ph := s.Status.Phase
		needsRunner := !ph.IsFinal() && !idlePhase(ph) || idlePhase(ph) && len(pendingMessages(s)) > 0
		if needsRunner {
			res = lowestResult(res, ctrl.Result{RequeueAfter: time.Millisecond})
		}
	}
	after, aerr := r.afterStatus(ctx, s, obs, now.Time)
	return lowestResult(res, after), errors.Join(err, aerr)
}

// firstStatus is the first reconcile of a session: one status patch that
// says it is Pending (computeStatus with nothing observed, the one place that
// sets Pending) and nothing else: no finalizer, quota check, pod or
// NetworkPolicy. The rest follows on the next reconcile, so a session created
// behind a burst gets its first status after one API write of its own (see
// "First status under a burst" in docs/design.md).
func (r *Reconciler) firstStatus(ctx context.Context, s *agentsv1.AgentSession) (ctrl.Result, error) {
	base := s.DeepCopy()
	s.Status = computeStatus(s, observation{eventsPrefix: r.EventsPrefix, queued: true}, metav1.NewTime(r.Now()))
	if err := r.Client.Status().Patch(ctx, s, lockedMergeFrom(base)); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil // a stale cache: read again
		}
		return ctrl.Result{}, fmt.Errorf("patch first status: %w", err)
	}
	r.recordTransition(base, s)
	// The status update wakes the session again; this requeue is the safety net.
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// heldElsewhere reports whether another operator instance holds a live
// claim on s; then nothing is done for s here (no status, pod or runner)
// until the claim expires or is released, and an Event names the holder.
func (r *Reconciler) heldElsewhere(ctx context.Context, s *agentsv1.AgentSession) (ctrl.Result, bool) {
	if r.Claims == nil {
		return ctrl.Result{}, false
	}
	if p, ok := r.Runner.Progress(s.UID); ok && p.Done && p.Foreign != "" {
		if r.Now().Before(p.ForeignUntil) {
			// The runner found the session claimed by another instance (this
			// reconcile's cache had not seen the claim yet): say so, look again later.
			r.announceForeign(ctx, s, p.Foreign)
			return ctrl.Result{RequeueAfter: p.ForeignUntil.Sub(r.Now())}, true
		}
		r.Runner.Forget(s.UID)
	}
	f, err := r.Claims.Holding(ctx, s.Namespace, s.UID)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not read the session's claim", "reason", err.Error())
		return ctrl.Result{RequeueAfter: stopPoll}, true
	}
	if f == nil {
		r.forgetForeign(client.ObjectKeyFromObject(s))
		return ctrl.Result{}, false
	}
	if p, ok := r.Runner.Progress(s.UID); ok && p.Done {
		r.Runner.Forget(s.UID) // a runner that found the claim taken: try again once it expires
	}
	r.announceForeign(ctx, s, f.Holder.String())
	return ctrl.Result{RequeueAfter: time.Until(f.Until) + 100*time.Millisecond}, true
}

// announceForeign records the OwnedElsewhere Event of s, once per holder:
// whichever of this reconciler's claim check or its runner found the
// session claimed by holder.
func (r *Reconciler) announceForeign(ctx context.Context, s *agentsv1.AgentSession, holder string) {
	key, h := client.ObjectKeyFromObject(s), foreignHolder{uid: s.UID, holder: holder}
	r.foreignMu.Lock()
	if r.foreign == nil {
		r.foreign = map[types.NamespacedName]foreignHolder{}
	}
	announce := r.foreign[key] != h
	r.foreign[key] = h
	r.foreignMu.Unlock()
	if announce {
		ctrl.LoggerFrom(ctx).Info("Session driven by another operator instance; leaving it alone", "owner", holder)
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, ReasonOwnedElsewhere, "Claim",
			"Driven by operator instance %s; instance %s leaves it alone until that claim ends", holder, r.Claims.Me)
	}
}

// foreignHolder is the holder last announced for a session.
type foreignHolder struct {
	uid    types.UID
	holder string
}

// forgetForeign drops what announceForeign remembers of the session key.
func (r *Reconciler) forgetForeign(key types.NamespacedName) {
	r.foreignMu.Lock()
	delete(r.foreign, key)
	r.foreignMu.Unlock()
}

// ReasonOwnedElsewhere is the Event reason of a session another instance drives.
const ReasonOwnedElsewhere = "OwnedElsewhere"

// lockedMergeFrom is a merge patch that carries base's resourceVersion, so
// the API server refuses it when the object changed since it was read.
func lockedMergeFrom(base client.Object) client.Patch {
	return client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
}

// pendingMessages are the messages of spec.messages that status does not
// record as delivered.
func pendingMessages(s *agentsv1.AgentSession) []agentsv1.Message {
	var out []agentsv1.Message
	for _, m := range s.Spec.Messages {
		if !slices.Contains(s.Status.MessagesDelivered, m.Name) {
			out = append(out, m)
		}
	}
	return out
}

// act observes the pod and the runner and changes them as the spec asks.
func (r *Reconciler) act(ctx context.Context, s *agentsv1.AgentSession) (observation, ctrl.Result, error) {
	obs := observation{eventsPrefix: r.EventsPrefix}
	pod, err := r.getPod(ctx, s)
	if err != nil {
		return obs, ctrl.Result{}, err
	}
	obs.pod = pod
	if pod != nil && !podGone(pod) {
		// Kept while the pod lives, not only when it is created: a runner
		// starts only with the pod confined, a stop never waits for it.
		if sharedWorkspace(s) {
			obs.confineErr = r.ownerConfined(ctx, s, pod)
		} else {
			obs.confineErr = errors.Join(r.keepPodLabels(ctx, s, pod), r.keepNetworkPolicy(ctx, s))
		}
	}
	obs, res, err := r.actOnPod(ctx, s, obs)
	if obs.confineErr != nil {
		// Not an error to back off from (the backoff grows to 16 min, and
		// a message would wait as long after the API server takes writes
		// again): WorkspaceReady says why nothing starts, the
		// reconcile's generation stays unobserved, and it is tried again
		// every confinePoll.
		ctrl.LoggerFrom(ctx).Error(obs.confineErr, "The workspace pod's confinement could not be kept; no input starts in it until it is")
		res = lowestResult(res, ctrl.Result{RequeueAfter: confinePoll})
	}
	return obs, res, err
}

// confinePoll is how often a session whose pod's confinement could not be
// written again is looked at.
const confinePoll = 10 * time.Second

// workspaceSharers are the children running in the workspace pod that
// policy o confines (its controller's), read from the cache.
func (r *Reconciler) workspaceSharers(ctx context.Context, o client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "AgentSession" {
		return nil
	}
	var list agentsv1.AgentSessionList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()),
		client.MatchingLabels{agentsv1.LabelParentUID: string(ref.UID)}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List the children of a workspace's owner", "owner", ref.Name)
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if c := &list.Items[i]; sharedWorkspace(c) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		}
	}
	return reqs
}

// ownerConfined says why the pod a child shares with its workspace owner is
// not confined, or nil: the owner keeps the pod's labels and NetworkPolicy
// (its own reconcile writes them again, and suspends its runner while it
// cannot), and a child runs nothing in the pod meanwhile either.
func (r *Reconciler) ownerConfined(ctx context.Context, s *agentsv1.AgentSession, pod *corev1.Pod) error {
	owner, ownerUID := runner.WorkspaceOwner(s)
	if pod.Labels[agentsv1.LabelSessionUID] != string(ownerUID) || pod.Labels[labelManagedBy] != managedBy {
		return fmt.Errorf("the labels of workspace pod %s, which session %s keeps, were removed or changed", pod.Name, owner)
	}
	o := &agentsv1.AgentSession{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: owner}, o); err != nil {
		return fmt.Errorf("read session %s, which keeps workspace pod %s: %w", owner, pod.Name, err)
	}
	if o.UID != ownerUID {
		return fmt.Errorf("session %s, which kept workspace pod %s, was replaced", owner, pod.Name)
	}
	np, err := r.readPolicy(ctx, o)
	switch {
	case err == nil && policyIntact(np, o):
		return nil
	case err == nil || apierrors.IsNotFound(err):
		return fmt.Errorf("the NetworkPolicy %s of workspace pod %s, which session %s keeps, was removed or changed", networkPolicyName(o), pod.Name, owner)
	default:
		return fmt.Errorf("read NetworkPolicy %s: %w", networkPolicyName(o), err)
	}
}

// keepPodLabels writes back the labels the session's NetworkPolicy selects
// its pod by (the session UID) and the manager's cache watches it by
// (managed-by), when someone removed or changed them: without the first the
// pod is unconfined, without the second it drops out of the cache and would
// be taken for lost. Children in a shared workspace leave it to the parent.
func (r *Reconciler) keepPodLabels(ctx context.Context, s *agentsv1.AgentSession, pod *corev1.Pod) error {
	if sharedWorkspace(s) || pod.Labels[agentsv1.LabelSessionUID] == string(s.UID) && pod.Labels[labelManagedBy] == managedBy {
		return nil
	}
	base := pod.DeepCopy()
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[agentsv1.LabelSessionUID], pod.Labels[labelManagedBy] = string(s.UID), managedBy
	if err := r.Client.Patch(ctx, pod, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("restore the labels of pod %s: %w", pod.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Restored the labels of the workspace pod", "pod", klog.KObj(pod))
	r.Recorder.Eventf(s, pod, corev1.EventTypeWarning, ReasonPodLabelsRestored, "RestorePodLabels",
		"The labels %s and %s of workspace pod %s were removed or changed; written again", agentsv1.LabelSessionUID, labelManagedBy, pod.Name)
	return nil
}

// ReasonPodLabelsRestored is the Event reason of a workspace pod whose
// session-uid or managed-by label was written again.
const ReasonPodLabelsRestored = "PodLabelsRestored"

// actOnPod is act once the pod was read and its NetworkPolicy kept.
func (r *Reconciler) actOnPod(ctx context.Context, s *agentsv1.AgentSession, obs observation) (observation, ctrl.Result, error) {
	pod := obs.pod
	var err error
	if s.Spec.Abort || s.Status.Phase == agentsv1.PhaseFailed || s.Status.Phase == agentsv1.PhaseAborted {
		// The children stop with their parent; each of them does the same for its own.
		if err := runner.AbortChildren(ctx, r.Client, s); err != nil {
			return obs, ctrl.Result{}, err
		}
	}
	if s.Status.Phase == agentsv1.PhaseFailed || s.Status.Phase == agentsv1.PhaseAborted {
		obs.released = pod == nil
		if !r.Runner.Running(s.UID) {
			r.Runner.Forget(s.UID) // nothing runs for a final session; status keeps the counters
		}
		return obs, ctrl.Result{}, nil // afterStatus releases the pod
	}
	if s.Spec.Abort {
		return obs, r.stopRunner(s.UID, r.Runner.Abort), nil
	}
	if idlePhase(s.Status.Phase) && !r.Runner.Running(s.UID) {
		return r.idle(ctx, s, pod, obs)
	}
	if podGone(pod) || (pod == nil && loopStarted(s)) {
		// A new pod loses no work before the loop started or on a claim.
		if !loopStarted(s) || s.Spec.Workspace.Volume.PersistentVolumeClaim != nil {
			if o, res, ok, err := r.retryStart(ctx, s, pod, obs); ok {
				return o, res, err
			}
		}
		return r.workspaceLost(ctx, s, pod, obs)
	}
	if pod == nil {
		if sharedWorkspace(s) {
			return obs, ctrl.Result{}, nil // the parent creates its pod; its events wake us
		}
		if obs.quotaHeld, err = r.quotaHold(ctx, s); obs.quotaHeld != "" || err != nil {
			// A poll, not news: low priority, so new sessions' first
			// reconciles (Add events) go before a queue of held sessions.
			return obs, ctrl.Result{RequeueAfter: quotaPoll, Priority: ptr.To(handler.LowPriority)}, err
		}
		if obs.configError, err = r.workspaceRefsProblem(ctx, s); obs.configError != "" || err != nil {
			return obs, ctrl.Result{}, err
		}
		obs.pod, err = r.createPod(ctx, s)
		if err != nil || obs.pod == nil || !podReady(obs.pod) || s.Spec.Suspend {
			return obs, ctrl.Result{}, err
		}
		// A claimed warm-pool pod is ready already: its runner starts now,
		// not a status write and a watch delivery later (issue 24).
		return obs, ctrl.Result{}, r.ensureRunner(obs, s, obs.pod)
	}
	if s.Spec.Suspend {
		obs.suspended = true
		return obs, r.stopRunner(s.UID, r.Runner.Suspend), nil
	}
	if !podReady(pod) {
		if msg, err := r.claimLostUnder(ctx, s, pod); msg != "" || err != nil {
			if msg != "" {
				obs.lost, obs.lostClaim, obs.claimUnderPendingPod = agentsv1.ReasonWorkspaceLost, msg, true
				ctrl.LoggerFrom(ctx).Info("Workspace claim deleted under a pod waiting to be scheduled; failing the session",
					"pod", klog.KObj(pod), "claim", msg)
				r.Runner.Abort(s.UID)
			}
			return obs, ctrl.Result{}, err
		}
		return obs, ctrl.Result{RequeueAfter: claimPoll(s, pod)}, nil // the pod watch brings Ready
	}
	// The runner is the one owner of spec.limits.deadline: it bounds working
	// time, which only a running input spends.
	return obs, ctrl.Result{}, r.ensureRunner(obs, s, pod)
}

// idle handles a session that finished its inputs (Succeeded or
// AwaitingInput) and has no runner: a message starts one (in a new pod if
// the old one was released), else the pod is released once
// spec.workspace.retainAfterSuccess has passed. Nothing here fails the
// session: an idle session's phase changes only by a new message.
func (r *Reconciler) idle(ctx context.Context, s *agentsv1.AgentSession, pod *corev1.Pod, obs observation) (observation, ctrl.Result, error) {
	obs.idle = true
	obs.suspended = s.Spec.Suspend
	if historyExpired(s) {
		return obs, ctrl.Result{}, nil // a message cannot resume it; status says so
	}
	if len(pendingMessages(s)) > 0 && !s.Spec.Suspend {
		switch {
		case podGone(pod):
			// The pod made for the message could not start: the runtime's
			// fault is retried (bounded); an init container that failed (a
			// clone whose credentials were revoked since) fails the input
			// the message started, where a new pod each time would fail
			// the same way, forever.
			if o, res, ok, err := r.retryStart(ctx, s, pod, obs); ok {
				return o, res, err
			}
			if msg, ok := initFailure(pod); ok {
				obs.lost, obs.initFailure = agentsv1.ReasonWorkspaceInitFailed, msg
				ctrl.LoggerFrom(ctx).Info("Workspace pod for a message could not start; failing the session", "pod", klog.KObj(pod), "failure", msg)
				return obs, ctrl.Result{}, nil
			}
			obs.releasing = true // afterStatus deletes it; a new one follows
			return obs, ctrl.Result{RequeueAfter: stopPoll}, nil
		case pod == nil && sharedWorkspace(s):
			return obs, ctrl.Result{}, nil // the parent's pod; the parent brings it back
		case pod == nil:
			// The claim of a released pod may have been deleted meanwhile: one
			// still being deleted is waited for, one gone is made anew,
			// empty, as an emptyDir session's next pod is, and said so.
			gone, deleting, err := r.claimGone(ctx, s)
			switch {
			case err != nil:
				return obs, ctrl.Result{}, err
			case deleting:
				return obs, ctrl.Result{}, fmt.Errorf("%s; the next pod waits for it to go", gone)
			}
			if obs.configError, err = r.workspaceRefsProblem(ctx, s); obs.configError != "" || err != nil {
				return obs, ctrl.Result{}, err
			}
			obs.pod, err = r.createPod(ctx, s)
			if err == nil && gone != "" {
				r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, ReasonWorkspaceClaimRecreated, "CreateClaim",
					"%s while the session was idle; a new, empty one was created for the next pod", gone)
			}
			return obs, ctrl.Result{}, err
		case !podReady(pod):
			// A message's pod whose claim was deleted under it is
			// replaced: the case pod == nil above makes the claim anew.
			if msg, err := r.claimLostUnder(ctx, s, pod); msg != "" || err != nil {
				if msg != "" {
					ctrl.LoggerFrom(ctx).Info("Workspace claim deleted under the pod of a message; replacing the pod", "pod", klog.KObj(pod), "claim", msg)
					obs.releasing = true // afterStatus deletes it
				}
				return obs, ctrl.Result{RequeueAfter: stopPoll}, err
			}
			return obs, ctrl.Result{RequeueAfter: claimPoll(s, pod)}, nil // the pod watch brings Ready
		}
		return obs, ctrl.Result{}, r.ensureRunner(obs, s, pod)
	}
	if sharedWorkspace(s) {
		return obs, ctrl.Result{}, nil // the parent's pod is the parent's to release
	}
	if pod == nil || podGone(pod) {
		obs.releasing = pod != nil
		obs.released = true
		return obs, ctrl.Result{}, nil
	}
	since := r.Now()
	if t := s.Status.IdleSince; t != nil {
		since = t.Time
	}
	left := since.Add(retainAfterSuccess(s)).Sub(r.Now())
	if left > 0 {
		return obs, ctrl.Result{RequeueAfter: left}, nil
	}
	obs.releasing = true // recorded in status first, then afterStatus deletes the pod
	return obs, ctrl.Result{}, nil
}

// DefaultRetainAfterSuccess is how long an idle session's pod is kept when
// spec.workspace.retainAfterSuccess is unset.
const DefaultRetainAfterSuccess = 10 * time.Minute

func retainAfterSuccess(s *agentsv1.AgentSession) time.Duration {
	if d := s.Spec.Workspace.RetainAfterSuccess; d != nil {
		return d.Duration
	}
	return DefaultRetainAfterSuccess
}

// idlePhase reports whether no input runs in phase and the session waits
// for a message.
func idlePhase(p agentsv1.Phase) bool {
	return p == agentsv1.PhaseSucceeded || p == agentsv1.PhaseAwaitingInput
}

// historyExpired reports whether status says the journal lost the session.
func historyExpired(s *agentsv1.AgentSession) bool {
	c := meta.FindStatusCondition(s.Status.Conditions, agentsv1.ConditionHistoryAvailable)
	return c != nil && c.Status == metav1.ConditionFalse
}

// liveReader reads from the API server, not the cache.
func (r *Reconciler) liveReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// ensureRunner starts the runner (a new one when the last one ended) and
// offers it the messages; not while the pod's confinement could not be
// kept (obs.confineErr), and a runner running then is suspended: no tool
// runs in an unconfined pod. Its input resumes from the journal once the
// confinement is back, as after a manager restart (a call cut short gets
// an error result, never runs twice).
func (r *Reconciler) ensureRunner(obs observation, s *agentsv1.AgentSession, pod *corev1.Pod) error {
	if obs.confineErr != nil {
		if r.Runner.Running(s.UID) {
			r.Runner.Suspend(s.UID)
		}
		return nil // act requeues; status says why
	}
	if err := r.Runner.Ensure(s, pod.Name); err != nil {
		return fmt.Errorf("start runner: %w", err)
	}
	return nil
}

// stopRunner asks the runner to stop and polls until it has.
func (r *Reconciler) stopRunner(uid types.UID, stop func(types.UID)) ctrl.Result {
	if r.Runner.Running(uid) {
		stop(uid)
		return ctrl.Result{RequeueAfter: stopPoll}
	}
	return ctrl.Result{}
}

// retryStart replaces a pod one of whose containers the container runtime
// could not start (runtimeStartFailure): the runtime's fault, seen on
// saturated nodes, so another pod may well start. The caller knows that a
// new pod loses no work (the loop has not started, the workspace is on the
// session's own claim, or an idle session's pod is made for a message);
// only while no runner uses the pod, at most MaxWorkspaceStartRetries times;
// then the session fails with WorkspaceInitFailed. Each replaced pod is
// counted once: status.workspaceStartRetries is written first (this
// reconcile's status), the pod is deleted by the next reconcile, which knows
// the pod was counted by its AnnotationStartAttempt being below the count,
// and the new pod is created as for any session without one. ok is false
// when the pod is not one to retry.
func (r *Reconciler) retryStart(ctx context.Context, s *agentsv1.AgentSession, pod *corev1.Pod, obs observation) (observation, ctrl.Result, bool, error) {
	msg, failed := runtimeStartFailure(pod)
	if !failed || sharedWorkspace(s) || r.Runner.Running(s.UID) {
		return obs, ctrl.Result{}, false, nil
	}
	retries := s.Status.WorkspaceStartRetries
	obs.startRetry = msg
	switch {
	case startAttempt(pod) < retries: // counted: replace it
		if pod.DeletionTimestamp == nil {
			ctrl.LoggerFrom(ctx).Info("Replacing the workspace pod the container runtime could not start",
				"pod", klog.KObj(pod), "retry", retries, "failure", msg)
			if err := r.Client.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
				return obs, ctrl.Result{}, true, fmt.Errorf("delete pod the runtime could not start: %w", err)
			}
			r.Recorder.Eventf(s, pod, corev1.EventTypeWarning, agentsv1.ReasonWorkspaceStartRetried, "ReplacePod",
				"%s; replacing workspace pod %s (retry %d of %d)", msg, pod.Name, retries, MaxWorkspaceStartRetries)
		}
		return obs, ctrl.Result{RequeueAfter: stopPoll}, true, nil
	case retries >= MaxWorkspaceStartRetries:
		obs.startRetry = ""
		obs.lost = agentsv1.ReasonWorkspaceInitFailed
		obs.initFailure = fmt.Sprintf("%s, also after %d new pods", msg, retries)
		r.Runner.Abort(s.UID)
		return obs, ctrl.Result{}, true, nil
	}
	obs.countStartRetry = true // this status write counts it; the next reconcile replaces the pod
	return obs, ctrl.Result{}, true, nil
}

// workspaceLost applies the pod-loss policy: with an emptyDir the work is gone
// and the session fails (WorkspaceLost); with a PVC the runner is detached,
// the pod recreated and the session resumes from its journal.
func (r *Reconciler) workspaceLost(ctx context.Context, s *agentsv1.AgentSession, pod *corev1.Pod, obs observation) (observation, ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if msg, ok := initFailure(pod); ok {
		// The pod never started: a new one would fail the same way (a clone
		// with wrong credentials, an unreachable repository).
		obs.lost, obs.initFailure = agentsv1.ReasonWorkspaceInitFailed, msg
		log.Info("Workspace pod could not start; failing the session", "pod", klog.KRef(s.Namespace, podName(s)), "failure", msg)
		r.Runner.Abort(s.UID)
		return obs, ctrl.Result{}, nil
	}
	if s.Spec.Workspace.Volume.PersistentVolumeClaim == nil || sharedWorkspace(s) {
		obs.lost = agentsv1.ReasonWorkspaceLost
		if limit, ok := oomKilled(pod); ok {
			obs.lost, obs.memoryLimit = agentsv1.ReasonWorkspaceOOMKilled, limit
		}
		log.Info("Workspace pod lost; failing the session", "pod", klog.KRef(s.Namespace, podName(s)), "reason", obs.lost)
		r.Runner.Abort(s.UID)
		return obs, ctrl.Result{}, nil
	}
	obs.recreated = true
	if r.Runner.Running(s.UID) {
		r.Runner.Suspend(s.UID)
		return obs, ctrl.Result{RequeueAfter: stopPoll}, nil
	}
	r.Runner.Forget(s.UID)
	if pod != nil {
		if pod.DeletionTimestamp == nil {
			log.Info("Deleting the failed workspace pod", "pod", klog.KObj(pod))
			if err := r.Client.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
				return obs, ctrl.Result{}, fmt.Errorf("delete failed pod: %w", err)
			}
		}
		return obs, ctrl.Result{RequeueAfter: stopPoll}, nil
	}
	// The claim holds the input's work: one deleted with the pod is never
	// made anew under it (read once, when the new pod is due).
	if msg, _, err := r.claimGone(ctx, s); msg != "" || err != nil {
		if msg != "" {
			obs.recreated, obs.lost, obs.lostClaim = false, agentsv1.ReasonWorkspaceLost, msg
			log.Info("Workspace pod and claim lost; failing the session", "pod", klog.KRef(s.Namespace, podName(s)), "claim", msg)
			r.Runner.Abort(s.UID)
		}
		return obs, ctrl.Result{}, err
	}
	var err error
	if obs.configError, err = r.workspaceRefsProblem(ctx, s); obs.configError != "" || err != nil {
		r.Runner.Abort(s.UID)
		return obs, ctrl.Result{}, err
	}
	obs.pod, err = r.createPod(ctx, s)
	return obs, ctrl.Result{}, err
}

// afterStatus runs the actions that depend on the new status: releasing the
// pod of a failed or aborted session, or of an idle one whose status now
// says so, and ttlSecondsAfterFinished.
func (r *Reconciler) afterStatus(ctx context.Context, s *agentsv1.AgentSession, obs observation, now time.Time) (ctrl.Result, error) {
	// Children in a shared workspace run in this pod: it stays until they
	// stopped (a failed parent aborts them first, see act), so they end
	// Aborted, not WorkspaceLost. Their status changes wake this session.
	childrenLive := slices.ContainsFunc(obs.children, func(c agentsv1.ChildStatus) bool { return !c.Phase.IsFinal() })
	if obs.releasing && !childrenLive {
		if err := r.releasePod(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !s.Status.Phase.IsFinal() {
		return ctrl.Result{}, nil
	}
	var res ctrl.Result
	if s.Status.Phase != agentsv1.PhaseSucceeded {
		switch {
		case r.Runner.Running(s.UID):
			r.Runner.Abort(s.UID)
			res.RequeueAfter = stopPoll
		case childrenLive:
			res.RequeueAfter = stopPoll
		default:
			if err := r.releasePod(ctx, s); err != nil {
				return res, err
			}
		}
	}
	ttl := s.Spec.TTLSecondsAfterFinished
	if ttl == nil || s.Status.CompletionTime == nil {
		return res, nil
	}
	expiry := s.Status.CompletionTime.Add(time.Duration(*ttl) * time.Second)
	if now.Before(expiry) {
		return lowestResult(res, ctrl.Result{RequeueAfter: expiry.Sub(now)}), nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting finished session after ttlSecondsAfterFinished")
	if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
		return res, fmt.Errorf("delete expired session: %w", err)
	}
	return res, nil
}

// finalize stops the runner (the loop is aborted and its journal flushed),
// deletes the pod and removes the finalizer.
func (r *Reconciler) finalize(ctx context.Context, s *agentsv1.AgentSession) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s, agentsv1.Finalizer) {
		return ctrl.Result{}, nil
	}
	if err := runner.AbortChildren(ctx, r.Client, s); err != nil {
		return ctrl.Result{}, err
	}
	if res := r.stopRunner(s.UID, r.Runner.Abort); res.RequeueAfter > 0 {
		return res, nil
	}
	r.Runner.Forget(s.UID)
	if err := r.releasePod(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	r.pools.forget(s.UID)
	r.writes.forget(client.ObjectKeyFromObject(s))
	base := s.DeepCopy()
	controllerutil.RemoveFinalizer(s, agentsv1.Finalizer)
	if err := r.Client.Patch(ctx, s, lockedMergeFrom(base)); client.IgnoreNotFound(err) != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, fmt.Errorf("remove finalizer: %w", err)
	}
	return ctrl.Result{}, nil
}

// getPod returns the session's pod, nil if there is none, and an error for
// a pod of that name that this session does not control (never adopted).
func (r *Reconciler) getPod(ctx context.Context, s *agentsv1.AgentSession) (*corev1.Pod, error) {
	owner, ownerUID := runner.WorkspaceOwner(s)
	pod := &corev1.Pod{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: owner + podNameSuffix}, pod)
	if apierrors.IsNotFound(err) {
		pod, err := r.claimedPod(ctx, s.Namespace, ownerUID) // a warm pod has another name
		if pod != nil || err != nil {
			return pod, err
		}
		return r.uncachedPod(ctx, s, ownerUID)
	}
	if err != nil {
		return nil, fmt.Errorf("get pod: %w", err)
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != ownerUID {
		return nil, reconcile.TerminalError(fmt.Errorf("pod %s exists and is not controlled by session %s", pod.Name, owner))
	}
	return pod, nil
}

// uncachedPod reads the pod status names from the API server when the cache
// has none for a session that is using its pod (Provisioning or Running): a
// pod whose managed-by label was removed is out of the cache but still the
// session's, and must not be taken for lost (keepPodLabels brings it back).
func (r *Reconciler) uncachedPod(ctx context.Context, s *agentsv1.AgentSession, ownerUID types.UID) (*corev1.Pod, error) {
	if ph := s.Status.Phase; s.Status.PodName == "" || ph != agentsv1.PhaseRunning && ph != agentsv1.PhaseProvisioning {
		return nil, nil
	}
	pod := &corev1.Pod{}
	if err := r.liveReader().Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Status.PodName}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get pod: %w", err)
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != ownerUID {
		return nil, nil
	}
	return pod, nil
}

func (r *Reconciler) createPod(ctx context.Context, s *agentsv1.AgentSession) (*corev1.Pod, error) {
	if err := r.ensureNetworkPolicy(ctx, s); err != nil { // before the pod: it never runs unconfined
		return nil, err
	}
	if pod, err := r.claimPod(ctx, s); pod != nil || err != nil {
		return pod, err
	}
	if pvc := buildPVC(s); pvc != nil {
		if err := ctrl.SetControllerReference(s, pvc, r.Scheme); err != nil {
			return nil, fmt.Errorf("own pvc: %w", err)
		}
		if err := r.Client.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create pvc: %w", err)
		}
	}
	pod := buildPod(s, r.Images)
	if err := ctrl.SetControllerReference(s, pod, r.Scheme); err != nil {
		return nil, fmt.Errorf("own pod: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Creating workspace pod", "pod", klog.KObj(pod))
	// Pods are immutable in all that matters here, so create-once with a
	// deterministic name is enough; there is nothing to apply later.
	if err := r.Client.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, nil // a stale cache; the pod watch brings it
		}
		return nil, fmt.Errorf("create pod: %w", err)
	}
	r.Recorder.Eventf(s, pod, corev1.EventTypeNormal, agentsv1.ReasonPodCreated, "CreatePod", "Created workspace pod %s", pod.Name)
	return pod, nil
}

// claimGone says how the claim the operator created for s
// (spec.workspace.volume.persistentVolumeClaim.size) is gone, and whether
// it is still being deleted; "" while it is there, and for a claim the
// operator did not create (workspaceRefsProblem checks those). Read live
// (claims are not cached): once per new pod of a session whose loop
// started (a lost pod's, an idle session's), and on each reconcile while
// the session's pod is not scheduled (claimLostUnder).
func (r *Reconciler) claimGone(ctx context.Context, s *agentsv1.AgentSession) (msg string, deleting bool, err error) {
	if buildPVC(s) == nil {
		return "", false, nil
	}
	pvc := &corev1.PersistentVolumeClaim{}
	err = r.liveReader().Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: pvcName(s)}, pvc)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the workspace claim %s was deleted", pvcName(s)), false, nil
	case err != nil:
		return "", false, fmt.Errorf("get workspace claim %s: %w", pvcName(s), err)
	case pvc.DeletionTimestamp != nil:
		return fmt.Sprintf("the workspace claim %s is being deleted", pvcName(s)), true, nil
	}
	return "", false, nil
}

// claimLostUnder says how the claim the operator created for s is gone
// (claimGone) while pod, which uses it, is not scheduled yet: such a pod
// would wait forever (the scheduler does not place a pod on a missing or
// deleted claim, and the claim's protection keeps a deleted one while the
// pod exists). "" for a scheduled pod and without such a claim: no read.
func (r *Reconciler) claimLostUnder(ctx context.Context, s *agentsv1.AgentSession, pod *corev1.Pod) (string, error) {
	if claimPoll(s, pod) == 0 {
		return "", nil
	}
	msg, _, err := r.claimGone(ctx, s)
	return msg, err
}

// pendingClaimPoll is how often a session whose pod waits to be scheduled
// on the claim the operator created looks at the claim again: claims are
// not watched (that would take list and watch of every claim in the
// cluster), and the pod does not change when its claim is deleted.
const pendingClaimPoll = 10 * time.Second

// claimPoll is pendingClaimPoll when claimLostUnder reads pod's claim, else
// 0: the pod watch brings what else there is to see.
func claimPoll(s *agentsv1.AgentSession, pod *corev1.Pod) time.Duration {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || buildPVC(s) == nil {
		return 0
	}
	return pendingClaimPoll
}

// ReasonWorkspaceClaimRecreated is the Event reason of an idle session
// whose deleted claim was made anew, empty, for its next pod.
const ReasonWorkspaceClaimRecreated = "WorkspaceClaimRecreated"

func (r *Reconciler) releasePod(ctx context.Context, s *agentsv1.AgentSession) error {
	if sharedWorkspace(s) {
		return nil // the parent's pod
	}
	pod, err := r.getPod(ctx, s)
	if err != nil || pod == nil || pod.DeletionTimestamp != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Deleting workspace pod", "pod", klog.KObj(pod))
	if err := r.Client.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete pod: %w", err)
	}
	return nil
}

func (r *Reconciler) progress(uid types.UID) *runner.Progress {
	if p, ok := r.Runner.Progress(uid); ok {
		return &p
	}
	return nil
}

// recordTransition emits a Kubernetes Event when the phase changed, except
// for a session's first phase, Pending: every session starts there, and its
// Event said only that the object exists (one API write per session, a
// thousand for a wide fan-out). A session held back (quota, queue) says why
// in its conditions.
func (r *Reconciler) recordTransition(old, s *agentsv1.AgentSession) {
	if old.Status.Phase == s.Status.Phase || (old.Status.Phase == "" && s.Status.Phase == agentsv1.PhasePending) {
		return
	}
	kind := corev1.EventTypeNormal
	if s.Status.Phase == agentsv1.PhaseFailed {
		kind = corev1.EventTypeWarning
	}
	note := fmt.Sprintf("Phase %s", s.Status.Phase)
	if s.Status.Phase == agentsv1.PhaseFailed && s.Status.Error != "" {
		note += ": " + truncate(s.Status.Error, 512)
	}
	r.Recorder.Eventf(s, nil, kind, string(s.Status.Phase), "Transition", "%s", note)
	if r.Metrics != nil && s.Status.Phase.IsFinal() {
		end := r.Now()
		if t := s.Status.CompletionTime; t != nil {
			end = t.Time
		}
		r.Metrics.SessionEnded(s.Namespace, string(s.Status.Phase), completedReason(s), end.Sub(s.CreationTimestamp.Time))
	}
}

// MetricsRecorder records what the controller sees: the sessions that
// ended, warm-pool claims and the warm pools' size (internal/metrics).
type MetricsRecorder interface {
	SessionEnded(namespace, phase, reason string, duration time.Duration)
	WarmPoolClaim(namespace string, claimed bool)
	SetWarmPoolPods(namespace string, n int)
}

// completedReason is the reason of the Completed condition: why the session ended.
func completedReason(s *agentsv1.AgentSession) string {
	if c := meta.FindStatusCondition(s.Status.Conditions, agentsv1.ConditionCompleted); c != nil {
		return c.Reason
	}
	return ""
}

// loopStarted reports whether the agent loop ever ran in this session's pod.
func loopStarted(s *agentsv1.AgentSession) bool {
	return s.Status.StartTime != nil || s.Status.LastEventSequence > 0
}

// lowestResult keeps the soonest non-zero RequeueAfter.
func lowestResult(a, b ctrl.Result) ctrl.Result {
	switch {
	case a.RequeueAfter == 0:
		return b
	case b.RequeueAfter == 0 || a.RequeueAfter < b.RequeueAfter:
		return a
	}
	return b
}

// sharedWorkspace reports whether s is a child running in its parent's pod.
func sharedWorkspace(s *agentsv1.AgentSession) bool {
	owner, _ := runner.WorkspaceOwner(s)
	return owner != s.Name
}

// children lists the child sessions of s (bounded, see boundChildren).
func (r *Reconciler) children(ctx context.Context, s *agentsv1.AgentSession) (childList, error) {
	var list agentsv1.AgentSessionList
	var children client.ListOption = client.MatchingLabels{agentsv1.LabelParentUID: string(s.UID)}
	if r.childrenIndexed {
		children = client.MatchingFields{childrenField: string(s.UID)}
	}
	if err := r.Client.List(ctx, &list, client.InNamespace(s.Namespace), children, client.UnsafeDisableDeepCopy); err != nil {
		return childList{}, fmt.Errorf("list children: %w", err)
	}
	return boundChildren(list.Items, agentsv1.MaxListedChildren), nil
}

// childList is status.children and status.childrenSummary.
type childList struct {
	listed  []agentsv1.ChildStatus
	summary *agentsv1.ChildrenSummary
}

// boundChildren returns at most max children in name order: every child
// that has not ended, then the newest ended ones; the summary counts them
// all by phase and sums the tree figures of the ones left out. all is only
// read (it may be the cache's own objects).
func boundChildren(all []agentsv1.AgentSession, max int) childList {
	if len(all) == 0 {
		return childList{}
	}
	sum := &agentsv1.ChildrenSummary{Total: int32(len(all)), Phases: map[string]int32{}}
	order := make([]*agentsv1.AgentSession, 0, len(all))
	for i := range all {
		c := &all[i]
		ph := c.Status.Phase
		if ph == "" {
			ph = agentsv1.PhasePending
		}
		sum.Phases[string(ph)]++
		order = append(order, c)
	}
	// Live children first, then the ended ones newest first.
	slices.SortStableFunc(order, func(a, b *agentsv1.AgentSession) int {
		if fa, fb := a.Status.Phase.IsFinal(), b.Status.Phase.IsFinal(); fa != fb {
			if fa {
				return 1
			}
			return -1
		}
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	keep := min(len(order), max)
	out := make([]agentsv1.ChildStatus, 0, keep)
	for _, c := range order[:keep] {
		out = append(out, agentsv1.ChildStatus{Name: c.Name, Phase: c.Status.Phase, TreeTokens: c.Status.TreeTokens, TreeCost: c.Status.TreeCost})
	}
	omitted := make([]agentsv1.ChildStatus, 0, len(order)-keep)
	for _, c := range order[keep:] {
		sum.Omitted++
		sum.OmittedTreeTokens += c.Status.TreeTokens
		omitted = append(omitted, agentsv1.ChildStatus{TreeCost: c.Status.TreeCost})
	}
	sum.OmittedTreeCost = treeCost("", omitted)
	slices.SortFunc(out, func(a, b agentsv1.ChildStatus) int { return strings.Compare(a.Name, b.Name) })
	return childList{listed: out, summary: sum}
}
