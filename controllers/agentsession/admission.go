package agentsession

import (
	"context"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// DefaultAdmissionWorkers is how many new sessions get their first status
// at once (--admission-workers).
const DefaultAdmissionWorkers = 64

// admission writes the first status (Pending) of new sessions with workers
// of its own, so a session created behind a burst is not queued behind the
// burst's full reconciles, nor behind the first statuses of the burst at
// the main controller's few workers: a first status is one status patch,
// cheap to run many at once. It makes no other change; the main controller
// does the rest (finalizer, quota, NetworkPolicy, pod) on the reconcile the
// status write wakes. With admission workers the main controller leaves
// unphased sessions alone (two writers of one patch would make one of them
// fail with a conflict for every new session); without, it writes the first
// status itself. Either way the transition is made by one function,
// firstStatus.
type admission struct {
	r *Reconciler
}

// unphased selects the sessions of this install's class without a phase.
func (a admission) unphased(o client.Object) bool {
	s, ok := o.(*agentsv1.AgentSession)
	return ok && s.Status.Phase == "" && s.DeletionTimestamp.IsZero() && s.Labels[agentsv1.LabelClass] == a.r.Class
}

// setup registers the admission controller with workers workers.
func (a admission) setup(mgr ctrl.Manager, workers int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1.AgentSession{}, builder.WithPredicates(predicate.NewPredicateFuncs(a.unphased))).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers,
			NeedLeaderElection: ptr.To(a.r.Shard == nil)}).
		Named("agentsession-admission").
		Complete(a)
}

// Reconcile writes the first status of a session that has none, after the
// same checks as the main controller (class, shard, another instance's
// claim); anything else is left to the main controller.
func (a admission) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &agentsv1.AgentSession{}
	if err := a.r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.Status.Phase != "" || !s.DeletionTimestamp.IsZero() || s.Labels[agentsv1.LabelClass] != a.r.Class {
		return ctrl.Result{}, nil
	}
	if ok, _ := a.r.drives(ctx, s); !ok {
		return ctrl.Result{}, nil // another replica's session: the main controller reports it
	}
	if _, foreign := a.r.heldElsewhere(ctx, s); foreign {
		return ctrl.Result{}, nil
	}
	res, err := a.r.firstStatus(ctx, s)
	if err != nil || res.Requeue {
		return res, err
	}
	return ctrl.Result{}, nil // the main controller reconciles it next (woken by the write)
}
