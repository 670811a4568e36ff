package runner

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/k8senv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// WorkspaceContainer is the name of the container tools run in.
const WorkspaceContainer = "workspace"

// K8sEnvFactory returns an EnvFactory over pool: tools run in the workspace
// container of the session's pod, which k8senv checks (labels and controller
// ownerReference) before every stream. Every stream presents the driver's
// owner token (the session's UID, the holder and the claim's epoch), so the
// sidecar refuses it once a newer driver of the session has used the pod.
func K8sEnvFactory(pool *k8senv.Pool) EnvFactory {
	return func(_ context.Context, s *agentsv1.AgentSession, pod string, d Driver) (tool.ExecutionEnvironment, error) {
		owner, ownerUID := WorkspaceOwner(s)
		var token executor.Owner
		if d.Holder != "" {
			token = executor.Owner{SessionUID: string(s.UID), Holder: d.Holder, Epoch: d.Epoch}
		}
		return pool.Env(k8senv.Target{
			Owner:     token,
			Namespace: s.Namespace,
			Pod:       pod,
			Container: WorkspaceContainer,
			Expect: k8senv.Expect{
				Labels: map[string]string{
					agentsv1.LabelSession:    owner,
					agentsv1.LabelSessionUID: string(ownerUID),
				},
				OwnerUID: ownerUID,
			},
		}), nil
	}
}

// WorkspaceOwner returns the session whose pod s runs in: its parent for a
// child in a shared workspace, else s itself. A child shares its parent's
// pod only when everything the manager sets on the children it spawns
// agrees: the shared-workspace annotation names the parent, spec.parentRef
// carries the parent's UID, and the session's controller ownerReference is
// that same AgentSession (name and UID). A session written by hand with a
// parentRef but not owned by that parent gets its own pod. (The chart's
// ValidatingAdmissionPolicy keeps these fields to the manager's service
// account; this check holds without it.)
func WorkspaceOwner(s *agentsv1.AgentSession) (string, types.UID) {
	if parent, ok := s.Annotations[agentsv1.AnnotationSharedWorkspace]; ok && OwnedByParent(s) &&
		parent == s.Spec.ParentRef.Name {
		return parent, types.UID(s.Spec.ParentRef.UID)
	}
	return s.Name, s.UID
}

// OwnedByParent reports whether s is a child as the manager spawns them: it
// has a parentRef with a UID and its controller ownerReference is that
// AgentSession (same name and UID).
func OwnedByParent(s *agentsv1.AgentSession) bool {
	p := s.Spec.ParentRef
	if p == nil || p.UID == "" {
		return false
	}
	ref := metav1.GetControllerOfNoCopy(s)
	return ref != nil && ref.Kind == "AgentSession" && ref.APIVersion == agentsv1.GroupVersion.String() &&
		ref.Name == p.Name && string(ref.UID) == p.UID
}
