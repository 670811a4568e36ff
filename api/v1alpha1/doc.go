// Package v1alpha1 contains the AgentSession API of the agent-operator.dev
// group: an autonomous coding agent run by the operator in a workspace pod.
//
// +kubebuilder:object:generate=true
// +groupName=agent-operator.dev
package v1alpha1
