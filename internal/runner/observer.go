package runner

import (
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// SessionInfo identifies a session to an Observer: the bounded fields
// metrics may use as labels, and the identity traces group spans by.
type SessionInfo struct {
	Namespace, Name string
	UID             types.UID
	// ParentUID is the parent session's UID; empty for a root session.
	ParentUID types.UID
	Provider  string
	Model     string
}

// Observer sees the live events of every session a runner drives, after
// redaction and in order per session: the events the journal records, not
// the ones a restore replays. Observe runs on the session's event path and
// must not block.
type Observer interface {
	Observe(s SessionInfo, ev loop.Event)
}

// sessionInfo describes obj to observers.
func sessionInfo(obj *agentsv1.AgentSession) SessionInfo {
	info := SessionInfo{
		Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID,
		Provider: string(obj.Spec.Model.Provider), Model: obj.Spec.Model.Name,
	}
	if p := obj.Spec.ParentRef; p != nil {
		info.ParentUID = types.UID(p.UID)
	}
	return info
}
