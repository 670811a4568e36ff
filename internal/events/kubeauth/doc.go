// Package kubeauth decides, with Kubernetes, who may read which namespace's
// events: it identifies the caller of the manager's credential endpoint by
// its bearer token (TokenReview) or its client certificate (verified against
// the cluster's client CA), then asks a SubjectAccessReview whether that
// caller may get the AgentSessions of the namespace.
package kubeauth
