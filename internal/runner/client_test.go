package runner

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

func TestCredentialOptIn(t *testing.T) {
	optedIn := map[string]string{LabelLLMCredentials: "true"}
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		provider    agentsv1.Provider
		baseURL     string
		wantErr     string // "" when the Secret may be used
	}{
		{name: "no label", provider: agentsv1.ProviderAnthropic, wantErr: "not opted in"},
		{name: "label not true", labels: map[string]string{LabelLLMCredentials: "yes"}, provider: agentsv1.ProviderAnthropic, wantErr: "not opted in"},
		{name: "labelled, any base URL", labels: optedIn, provider: agentsv1.ProviderAnthropic, baseURL: "http://listener.example:9000"},
		{name: "allowed host and path", labels: optedIn, provider: agentsv1.ProviderOpenAICompatible,
			annotations: map[string]string{AnnotationAllowedBaseURLs: "https://a.example/v1, https://llm.internal:8443/openai"},
			baseURL:     "https://llm.internal:8443/openai/v1"},
		{name: "provider default listed", labels: optedIn, provider: agentsv1.ProviderAnthropic,
			annotations: map[string]string{AnnotationAllowedBaseURLs: "https://api.anthropic.com"}},
		{name: "provider default not listed", labels: optedIn, provider: agentsv1.ProviderOpenAI,
			annotations: map[string]string{AnnotationAllowedBaseURLs: "https://llm.internal"}, wantErr: "may not be sent to https://api.openai.com/v1"},
		{name: "other host", labels: optedIn, provider: agentsv1.ProviderAnthropic,
			annotations: map[string]string{AnnotationAllowedBaseURLs: "https://llm.internal"}, baseURL: "https://llm.internal.evil.example", wantErr: "may not be sent"},
		{name: "other port", labels: optedIn, provider: agentsv1.ProviderAnthropic,
			annotations: map[string]string{AnnotationAllowedBaseURLs: "https://llm.internal"}, baseURL: "https://llm.internal:444", wantErr: "may not be sent"},
		{name: "http for https", labels: optedIn, provider: agentsv1.ProviderAnthropic,
			annotations: map[string]string{AnnotationAllowedBaseURLs: "https://llm.internal"}, baseURL: "http://llm.internal", wantErr: "may not be sent"},
		{name: "path prefix is not a segment", labels: optedIn, provider: agentsv1.ProviderAnthropic,
			annotations: map[string]string{AnnotationAllowedBaseURLs: "https://h.example/team-a"}, baseURL: "https://h.example/team-ab", wantErr: "may not be sent"},
		{name: "dot-dot out of the path", labels: optedIn, provider: agentsv1.ProviderAnthropic,
			annotations: map[string]string{AnnotationAllowedBaseURLs: "https://h.example/team-a"}, baseURL: "https://h.example/team-a/../team-b", wantErr: "may not be sent"},
		{name: "empty allow list", labels: optedIn, provider: agentsv1.ProviderAnthropic,
			annotations: map[string]string{AnnotationAllowedBaseURLs: ""}, wantErr: "may not be sent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keys", Labels: tt.labels, Annotations: tt.annotations},
				Data: map[string][]byte{"k": []byte("sk-secret-value")}}
			err := credentialOptIn(sec, tt.provider, tt.baseURL)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			case err != nil && strings.Contains(err.Error(), "sk-secret-value"):
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
}
