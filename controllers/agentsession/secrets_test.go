package agentsession

import (
	"encoding/json"
	"strings"
	"testing"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// TestWorkspacePodNeverReferencesTheAPIKeySecret: the provider API key is read
// by the manager only; no container of the workspace pod gets the Secret as
// env, envFrom or a volume, whatever the provider.
func TestWorkspacePodNeverReferencesTheAPIKeySecret(t *testing.T) {
	for _, p := range []agentsv1.Provider{agentsv1.ProviderAnthropic, agentsv1.ProviderOpenAI, agentsv1.ProviderGemini, agentsv1.ProviderOpenAICompatible} {
		t.Run(string(p), func(t *testing.T) {
			pod := buildPod(session(func(s *agentsv1.AgentSession) {
				s.Spec.Model.Provider = p
				s.Spec.Model.APIKeySecretRef = &agentsv1.SecretKeyRef{Name: "llm-api-keys", Key: "provider-key"}
				s.Spec.Workspace.Git = &agentsv1.GitSource{Repository: "https://example.com/r.git"}
			}), testImages)
			data, err := json.Marshal(pod.Spec)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"llm-api-keys", "provider-key"} {
				if strings.Contains(string(data), s) {
					t.Errorf("the workspace pod spec mentions %q:\n%s", s, data)
				}
			}
		})
	}
}
