package changes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/urlscope"
)

// AnnotationAllowedBaseURLs optionally restricts where push credentials may
// be sent: a push may use the Secret only when its remote is under one of the
// annotation's URLs (urlscope.Allows), as for LLM API keys and MCP headers.
const AnnotationAllowedBaseURLs = urlscope.Annotation

// SecretsFrom reads push credentials with r (the manager's uncached API
// reader). The push checks the Secret before it sends anything: it must be
// labelled agentsv1.LabelGitCredentials=true, and its
// AnnotationAllowedBaseURLs, when present, must allow the remote.
func SecretsFrom(r client.Reader) SecretReader {
	return func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
		var sec corev1.Secret
		if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &sec); err != nil {
			return nil, fmt.Errorf("get secret %s: %w", name, err)
		}
		return &sec, nil
	}
}

// credentialsAllowed returns why sec may not be sent as push credentials to
// remote, or nil when it may. Without the annotation any remote may get
// them, as for LLM keys: the annotation is how an admin limits a Secret to
// its hosts (and keeps it off http://).
func credentialsAllowed(sec *corev1.Secret, remote string) error {
	if sec.Labels[agentsv1.LabelGitCredentials] != "true" {
		return fmt.Errorf("push credentials Secret %s is not opted in as git push credentials: label it %s=true; nothing was sent",
			sec.Name, agentsv1.LabelGitCredentials)
	}
	allowed, ok := sec.Annotations[AnnotationAllowedBaseURLs]
	if ok {
		if urlscope.Allows(allowed, remote) {
			return nil
		}
		return fmt.Errorf("push credentials Secret %s may not be sent to %s: its annotation %s allows only %q; nothing was sent",
			sec.Name, redactURL(remote), AnnotationAllowedBaseURLs, allowed)
	}
	return nil
}
