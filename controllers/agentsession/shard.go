package agentsession

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// ShardRing is what the reconciler needs from the install's replica
// membership (*shard.Membership): the replica (pod name) a key belongs to.
type ShardRing interface {
	Preferred(key string) string
}

// shardRecheck is how soon a replica looks again at a session another
// replica is preferred for; a change of the replicas enqueues every session
// at once (Resync), this only covers views that differed for a moment.
const shardRecheck = time.Minute

// shardKey is what a session is sharded by: its tree's root, so that a
// parent and its children (which share its workspace) are driven by one
// replica. A top-level session is its own root; a child created before
// children carried agentsv1.LabelRootUID goes with its parent.
func shardKey(s *agentsv1.AgentSession) string {
	for _, l := range []string{agentsv1.LabelRootUID, agentsv1.LabelParentUID} {
		if v := s.Labels[l]; v != "" {
			return v
		}
	}
	return string(s.UID)
}

// drives reports whether this replica acts for s: always without sharding;
// with it, when the ring prefers this replica for s's tree, or this replica
// already drives s (its runner, live or ended with a status to write, or a
// live claim). Another replica's sessions are left alone entirely: no
// status, pod or runner here.
func (r *Reconciler) drives(ctx context.Context, s *agentsv1.AgentSession) (bool, error) {
	if r.Shard == nil {
		return true, nil
	}
	if _, ok := r.Runner.Progress(s.UID); ok {
		return true, nil
	}
	if r.Shard.Preferred(shardKey(s)) == r.Claims.Me.Pod {
		return true, nil
	}
	mine, err := r.Claims.Mine(ctx, s.Namespace, s.UID)
	if err != nil {
		return false, err
	}
	return mine, nil
}

// Resync enqueues every session of this install's class: the install's
// replicas changed, so some sessions may now be this replica's (a replica
// left) or no longer (one joined; those it drives stay until their runner
// ends).
func (r *Reconciler) Resync(ctx context.Context) error {
	var list agentsv1.AgentSessionList
	if err := r.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("list sessions to resync: %w", err)
	}
	for _, s := range list.Items {
		if s.Labels[agentsv1.LabelClass] == r.Class {
			r.Notify(types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
		}
	}
	return nil
}

// notDriven is the result of a reconcile of a session another replica drives.
func notDriven(ctx context.Context, err error) ctrl.Result {
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not read the session's claim", "reason", err.Error())
		return ctrl.Result{RequeueAfter: stopPoll}
	}
	return ctrl.Result{RequeueAfter: shardRecheck}
}
