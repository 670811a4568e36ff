package agentsession

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// Unserved classes: an install handles only the sessions of its class, and
// a session whose class no install serves in its namespace would otherwise
// wait without a status forever. Every install with ReportUnservedAfter set
// also watches the sessions of other classes that have no phase yet (the
// serving install's first status write always sets one). Once such a
// session is ReportUnservedAfter old, the install writes phase Pending and
// Accepted=False/ClassNotServed with one status patch carrying the
// resourceVersion read, and records one Warning Event. Several installs may
// race for it: only the first patch passes, the others get a conflict, read
// again and find the phase set. A session of another class that has a phase
// is never touched. The install serving the class, when it takes the session
// up, turns Accepted True (ClassServed) in its first status write
// (computeStatus); Pending is its usual first phase.

// watched is the AgentSession predicate: the sessions of this install's
// class, and, to report them unserved, the sessions of other classes that
// no install took up yet.
func (r *Reconciler) watched(o client.Object) bool {
	if o.GetLabels()[agentsv1.LabelClass] == r.Class {
		return true
	}
	s, ok := o.(*agentsv1.AgentSession)
	return ok && r.ReportUnservedAfter > 0 && s.Status.Phase == ""
}

// unservedDue returns whether s, a session of another class, is to be
// reported unserved, and how long to wait before (0: now).
func unservedDue(s *agentsv1.AgentSession, grace time.Duration, now time.Time) (time.Duration, bool) {
	if grace <= 0 || s.Status.Phase != "" || !s.DeletionTimestamp.IsZero() {
		return 0, false // not reported by this install, or taken up (or reported) already
	}
	return max(s.CreationTimestamp.Add(grace).Sub(now), 0), true
}

// unservedMessage says which class no install serves and what to do.
func unservedMessage(class string) string {
	if class == "" {
		return fmt.Sprintf("no operator install handles class %q (unlabelled sessions) in this namespace; label the "+
			"session with a class an install serves (%s) or install one without --session-class", class, agentsv1.LabelClass)
	}
	return fmt.Sprintf("no operator install handles class %q in this namespace; label the session with a class "+
		"an install serves or install one with --session-class=%s", class, class)
}

// reportUnserved handles a session of another class: once no install took
// it up within ReportUnservedAfter of its creation, it says so in status
// and in a Warning Event, once.
func (r *Reconciler) reportUnserved(ctx context.Context, s *agentsv1.AgentSession) (ctrl.Result, error) {
	wait, due := unservedDue(s, r.ReportUnservedAfter, r.Now())
	switch {
	case !due:
		return ctrl.Result{}, nil
	case wait > 0:
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	class := s.Labels[agentsv1.LabelClass]
	msg := unservedMessage(class)
	base := s.DeepCopy()
	s.Status.Phase = agentsv1.PhasePending
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: agentsv1.ConditionAccepted,
		Status: metav1.ConditionFalse, Reason: agentsv1.ReasonClassNotServed, Message: msg, ObservedGeneration: s.Generation})
	// The resourceVersion read makes the patch fail when anything changed
	// since: the serving install took the session up, or another install
	// reported it first.
	if err := r.Client.Status().Patch(ctx, s, lockedMergeFrom(base)); err != nil {
		switch {
		case apierrors.IsConflict(err):
			return ctrl.Result{Requeue: true}, nil // read again: it has a phase by now
		case apierrors.IsNotFound(err):
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("report unserved class %q: %w", class, err)
	}
	ctrl.LoggerFrom(ctx).Info("No operator install serves the session's class", "class", class)
	r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, agentsv1.ReasonClassNotServed, "Report", "%s", msg)
	return ctrl.Result{}, nil
}
