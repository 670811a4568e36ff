package agentsession

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
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
	Client   client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	Runner   SessionRunner
	Images   Images
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
	// MaxConcurrentReconciles is how many sessions are reconciled at once
	// (0: controller-runtime's default, 1). A session is never reconciled by
	// two workers at once; across sessions the quota orders sessions by
	// creation and warm pod claims are optimistic, so both hold with more.
	MaxConcurrentReconciles int

	pools *pools

	updates chan event.TypedGenericEvent[*agentsv1.AgentSession]
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
	r.pools = pools
	if len(r.WarmPools) > 0 {
		pr := &PoolReconciler{Client: r.Client, pools: pools}
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
	return ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1.AgentSession{}).
		Owns(&corev1.Pod{}, builder.WithPredicates(managed)).
		Owns(&agentsv1.AgentSession{}). // children wake their parent (status.children)
		WatchesRawSource(source.Channel(r.updates, &handler.TypedEnqueueRequestForObject[*agentsv1.AgentSession]{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("agentsession").
		Complete(r)
}

// +kubebuilder:rbac:groups=agent-operator.dev,resources=agentsessions,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=agent-operator.dev,resources=agentsessions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agent-operator.dev,resources=agentsessions/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods/exec,verbs=create;get
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;create
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=services,verbs=get
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconcile reads the session, decides and applies: finalizer, workspace pod,
// runner, then one status patch.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &agentsv1.AgentSession{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !s.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(s, agentsv1.Finalizer) {
		base := s.DeepCopy()
		controllerutil.AddFinalizer(s, agentsv1.Finalizer)
		if err := r.Client.Patch(ctx, s, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}

	base := s.DeepCopy()
	obs, res, err := r.act(ctx, s)
	obs.progress = r.progress(s.UID)
	children, cerr := r.children(ctx, s)
	err = errors.Join(err, cerr)
	obs.children = children
	now := metav1.NewTime(r.Now())
	s.Status = computeStatus(s, obs, now)
	if err == nil {
		s.Status.ObservedGeneration = s.Generation
	}
	r.recordTransition(base, s)
	if !equality.Semantic.DeepEqual(base.Status, s.Status) {
		// A merge patch of the status subresource: the controller is the only
		// writer of status, and conditions are replaced as a whole.
		if perr := r.Client.Status().Patch(ctx, s, client.MergeFrom(base)); perr != nil {
			return ctrl.Result{}, errors.Join(err, fmt.Errorf("patch status: %w", perr))
		}
	}
	after, aerr := r.afterStatus(ctx, s, now.Time)
	return lowestResult(res, after), errors.Join(err, aerr)
}

// act observes the pod and the runner and changes them as the spec asks.
func (r *Reconciler) act(ctx context.Context, s *agentsv1.AgentSession) (observation, ctrl.Result, error) {
	obs := observation{eventsPrefix: r.EventsPrefix}
	pod, err := r.getPod(ctx, s)
	if err != nil {
		return obs, ctrl.Result{}, err
	}
	obs.pod = pod
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
	if podGone(pod) || (pod == nil && loopStarted(s)) {
		return r.workspaceLost(ctx, s, pod, obs)
	}
	if pod == nil {
		if sharedWorkspace(s) {
			return obs, ctrl.Result{}, nil // the parent creates its pod; its events wake us
		}
		if obs.quotaHeld, err = r.quotaHold(ctx, s); obs.quotaHeld != "" || err != nil {
			return obs, ctrl.Result{RequeueAfter: quotaPoll}, err
		}
		obs.pod, err = r.createPod(ctx, s)
		return obs, ctrl.Result{}, err
	}
	if s.Spec.Suspend {
		obs.suspended = true
		return obs, r.stopRunner(s.UID, r.Runner.Suspend), nil
	}
	expired, wait := deadlineState(s, r.Now())
	switch {
	case expired && !r.Runner.Running(s.UID):
		// The runner enforces the deadline while it runs; this covers the time it does not.
		obs.expired = agentsv1.ReasonDeadlineExceeded
		return obs, ctrl.Result{}, nil
	case !podReady(pod):
		return obs, ctrl.Result{RequeueAfter: wait}, nil // the pod watch brings Ready
	}
	return obs, ctrl.Result{RequeueAfter: wait}, r.ensureRunner(s, pod)
}

// ensureRunner starts the runner (or restarts one that ended without a final
// phase, after a suspension) and offers it the messages.
func (r *Reconciler) ensureRunner(s *agentsv1.AgentSession, pod *corev1.Pod) error {
	if p, ok := r.Runner.Progress(s.UID); ok && p.Done && !p.Phase.IsFinal() {
		r.Runner.Forget(s.UID)
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

// workspaceLost applies the pod-loss policy: with an emptyDir the work is gone
// and the session fails (WorkspaceLost); with a PVC the runner is detached,
// the pod recreated and the session resumes from its journal.
func (r *Reconciler) workspaceLost(ctx context.Context, s *agentsv1.AgentSession, pod *corev1.Pod, obs observation) (observation, ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
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
	var err error
	obs.pod, err = r.createPod(ctx, s)
	return obs, ctrl.Result{}, err
}

// afterStatus runs the actions that depend on the new status: releasing the
// pod of a failed or aborted session and ttlSecondsAfterFinished.
func (r *Reconciler) afterStatus(ctx context.Context, s *agentsv1.AgentSession, now time.Time) (ctrl.Result, error) {
	if !s.Status.Phase.IsFinal() {
		return ctrl.Result{}, nil
	}
	var res ctrl.Result
	if s.Status.Phase != agentsv1.PhaseSucceeded {
		if r.Runner.Running(s.UID) {
			r.Runner.Abort(s.UID)
			res.RequeueAfter = stopPoll
		} else if err := r.releasePod(ctx, s); err != nil {
			return res, err
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
	base := s.DeepCopy()
	controllerutil.RemoveFinalizer(s, agentsv1.Finalizer)
	if err := r.Client.Patch(ctx, s, client.MergeFrom(base)); client.IgnoreNotFound(err) != nil {
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
		return r.claimedPod(ctx, s.Namespace, ownerUID) // a warm pod has another name
	}
	if err != nil {
		return nil, fmt.Errorf("get pod: %w", err)
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != ownerUID {
		return nil, reconcile.TerminalError(fmt.Errorf("pod %s exists and is not controlled by session %s", pod.Name, owner))
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

// recordTransition emits a Kubernetes Event when the phase changed.
func (r *Reconciler) recordTransition(old, s *agentsv1.AgentSession) {
	if old.Status.Phase == s.Status.Phase {
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
}

// loopStarted reports whether the agent loop ever ran in this session's pod.
func loopStarted(s *agentsv1.AgentSession) bool {
	return s.Status.StartTime != nil || s.Status.LastEventSequence > 0
}

// deadlineState reports whether spec.limits.deadline has passed and, if not,
// how long until it does (0 when there is no deadline).
func deadlineState(s *agentsv1.AgentSession, now time.Time) (bool, time.Duration) {
	d := s.Spec.Limits.Deadline
	if d == nil || s.Status.StartTime == nil {
		return false, 0
	}
	left := s.Status.StartTime.Add(d.Duration).Sub(now)
	if left <= 0 {
		return true, 0
	}
	return false, left
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

// children lists the child sessions of s, in name order.
func (r *Reconciler) children(ctx context.Context, s *agentsv1.AgentSession) ([]agentsv1.ChildStatus, error) {
	var list agentsv1.AgentSessionList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.Namespace),
		client.MatchingLabels{agentsv1.LabelParentUID: string(s.UID)}); err != nil {
		return nil, fmt.Errorf("list children: %w", err)
	}
	out := make([]agentsv1.ChildStatus, 0, len(list.Items))
	for _, c := range list.Items {
		out = append(out, agentsv1.ChildStatus{Name: c.Name, Phase: c.Status.Phase, TreeTokens: c.Status.TreeTokens})
	}
	slices.SortFunc(out, func(a, b agentsv1.ChildStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
