package changes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// SecretsFrom reads push credentials with r (the manager's uncached API
// reader). Only Secrets labelled agentsv1.LabelGitCredentials=true are
// returned: the operator sends their values to the remote the session
// names.
func SecretsFrom(r client.Reader) SecretReader {
	return func(ctx context.Context, namespace, name string) (map[string][]byte, error) {
		var sec corev1.Secret
		if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &sec); err != nil {
			return nil, fmt.Errorf("get secret %s: %w", name, err)
		}
		if sec.Labels[agentsv1.LabelGitCredentials] != "true" {
			return nil, fmt.Errorf("secret %s is not opted in as git push credentials: label it %s=true", name, agentsv1.LabelGitCredentials)
		}
		return sec.Data, nil
	}
}
