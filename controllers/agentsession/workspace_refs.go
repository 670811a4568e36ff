package agentsession

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/urlscope"
)

// The Secrets and the claim a workspace pod would reference.
//
// The manager creates the workspace pod, so a Secret the pod references is
// resolved with the manager's rights, not those of the session's author: a
// user who may only create AgentSessions could otherwise name any Secret of
// the namespace in spec.workspace.env (valueFrom.secretKeyRef) or as the
// clone credentials and read it from the workspace (the model, the tools and
// the session's events see the workspace). Like the LLM and MCP credentials,
// such a Secret must be opted in by a label set by whoever may label it:
//   - an env secretKeyRef: agentsv1.LabelWorkspaceSecret;
//   - spec.workspace.git.credentialsSecretRef: agentsv1.LabelGitCredentials,
//     the label of push credentials (both may be sent to the git host the
//     session names), and the repository must be under the Secret's
//     allowed-base-urls annotation when it has one (urlscope).
//
// The same holds for an existing claim named by
// spec.workspace.volume.persistentVolumeClaim.claimName: it would be mounted
// read-write into a pod running the session's image, so it must be labelled
// agentsv1.LabelWorkspaceVolume (a claim the operator created for another
// session is not, so no session mounts another's workspace by name).
//
// A Secret or claim not opted in, or missing (unless the reference is
// optional), ends the session Failed with reason ConfigError before any pod
// is created.

// workspaceRefsProblem returns why the workspace pod of s may not be
// created because of a Secret or claim it references ("" when it may), or
// an error when one could not be read.
func (r *Reconciler) workspaceRefsProblem(ctx context.Context, s *agentsv1.AgentSession) (string, error) {
	type ref struct {
		name, field, label string
		optional           bool
		target             string // where the Secret is sent: checked against its urlscope.Annotation
	}
	var refs []ref
	for _, e := range s.Spec.Workspace.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		k := e.ValueFrom.SecretKeyRef
		refs = append(refs, ref{k.Name, fmt.Sprintf("spec.workspace.env %s", e.Name), agentsv1.LabelWorkspaceSecret, k.Optional != nil && *k.Optional, ""})
	}
	if g := s.Spec.Workspace.Git; g != nil && g.CredentialsSecretRef != nil {
		refs = append(refs, ref{g.CredentialsSecretRef.Name, "spec.workspace.git.credentialsSecretRef", agentsv1.LabelGitCredentials, false, g.Repository})
	}
	for _, rf := range refs {
		sec := &corev1.Secret{}
		// Live: Secrets are not cached (the cache would hold every Secret).
		err := r.liveReader().Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: rf.name}, sec)
		switch {
		case apierrors.IsNotFound(err) && rf.optional:
			continue
		case apierrors.IsNotFound(err):
			return fmt.Sprintf("%s names secret %s, which does not exist", rf.field, rf.name), nil
		case err != nil:
			return "", fmt.Errorf("get secret %s of %s: %w", rf.name, rf.field, err)
		}
		if sec.Labels[rf.label] != "true" {
			return fmt.Sprintf("%s names secret %s, which is not opted in for the workspace: the operator gives the "+
				"workspace only Secrets labelled %s=true (kubectl label secret %s %s=true); no pod was created",
				rf.field, rf.name, rf.label, rf.name, rf.label), nil
		}
		if allowed, ok := sec.Annotations[urlscope.Annotation]; ok && rf.target != "" && !urlscope.Allows(allowed, rf.target) {
			return fmt.Sprintf("%s names secret %s, which may not be sent to %s: its annotation %s allows only %q; no pod was created",
				rf.field, rf.name, redactUserinfo(rf.target), urlscope.Annotation, allowed), nil
		}
	}
	return r.claimProblem(ctx, s)
}

// claimProblem is workspaceRefsProblem for an existing claim.
func (r *Reconciler) claimProblem(ctx context.Context, s *agentsv1.AgentSession) (string, error) {
	p := s.Spec.Workspace.Volume.PersistentVolumeClaim
	if p == nil || p.ClaimName == "" || sharedWorkspace(s) {
		return "", nil
	}
	const field = "spec.workspace.volume.persistentVolumeClaim.claimName"
	pvc := &corev1.PersistentVolumeClaim{}
	err := r.liveReader().Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: p.ClaimName}, pvc)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("%s names claim %s, which does not exist", field, p.ClaimName), nil
	case err != nil:
		return "", fmt.Errorf("get claim %s of %s: %w", p.ClaimName, field, err)
	}
	if pvc.Labels[agentsv1.LabelWorkspaceVolume] != "true" {
		return fmt.Sprintf("%s names claim %s, which is not opted in for workspaces: the operator mounts only claims "+
			"labelled %s=true (kubectl label pvc %s %s=true); no pod was created",
			field, p.ClaimName, agentsv1.LabelWorkspaceVolume, p.ClaimName, agentsv1.LabelWorkspaceVolume), nil
	}
	return "", nil
}

// redactUserinfo is u without the user information of a URL.
func redactUserinfo(u string) string { return urlUserinfo.ReplaceAllString(u, "${1}***@") }
