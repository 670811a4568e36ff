package runner

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/k8senv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// WorkspaceContainer is the name of the container tools run in.
const WorkspaceContainer = "workspace"

// K8sEnvFactory returns an EnvFactory over pool: tools run in the workspace
// container of the session's pod, which k8senv checks (labels and controller
// ownerReference) before every stream.
func K8sEnvFactory(pool *k8senv.Pool) EnvFactory {
	return func(_ context.Context, s *agentsv1.AgentSession, pod string) (tool.ExecutionEnvironment, error) {
		owner, ownerUID := WorkspaceOwner(s)
		return pool.Env(k8senv.Target{
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
// child in a shared workspace, else s itself.
func WorkspaceOwner(s *agentsv1.AgentSession) (string, types.UID) {
	if parent, ok := s.Annotations[agentsv1.AnnotationSharedWorkspace]; ok && s.Spec.ParentRef != nil &&
		parent == s.Spec.ParentRef.Name && s.Spec.ParentRef.UID != "" {
		return parent, types.UID(s.Spec.ParentRef.UID)
	}
	return s.Name, s.UID
}
