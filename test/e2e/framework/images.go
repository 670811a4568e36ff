package framework

import (
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Images built by `make images` (hack/images). Override with E2E_<NAME>_IMAGE, e.g.
// E2E_WORKSPACE_IMAGE=registry.example/workspace:v1, when testing pushed images.
var (
	WorkspaceImage = envOr("E2E_WORKSPACE_IMAGE", "agent-operator/workspace:dev")
	ManagerImage   = envOr("E2E_MANAGER_IMAGE", "agent-operator/manager:dev")
	ExecutorImage  = envOr("E2E_EXECUTOR_IMAGE", "agent-operator/executor:dev")
	LLMServerImage = envOr("E2E_LLMSERVER_IMAGE", "agent-operator/llmserver:dev")
	// MCPServerImage is the test MCP server (test/mcpserver) on the workspace image's userland:
	// an in-cluster Service by default, a stdio MCP server as a session's workspace image.
	MCPServerImage = envOr("E2E_MCPSERVER_IMAGE", "agent-operator/mcpserver:dev")
	// NATSImage is a NATS server with JetStream (nats-server at the version pinned in go.mod)
	// for the specs that run the operator with nats.mode=external.
	NATSImage = envOr("E2E_NATS_IMAGE", "agent-operator/nats:dev")
)

// ImagePullPolicy for the project's images: they are imported into the node, not pulled.
// Set E2E_IMAGE_PULL_POLICY=Always to test images pushed to a registry.
var ImagePullPolicy = corev1.PullPolicy(envOr("E2E_IMAGE_PULL_POLICY", string(corev1.PullIfNotPresent)))

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// WorkspacePod returns a pod that runs the workspace image and sleeps, ready for exec.
func WorkspacePod(namespace, name string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  new(bool),
			Containers: []corev1.Container{{
				Name:            "workspace",
				Image:           WorkspaceImage,
				ImagePullPolicy: ImagePullPolicy,
				Command:         []string{"sleep", "infinity"},
			}},
		},
	}
}
