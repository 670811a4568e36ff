package agentsession

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// TestWebFetchFromTheWorkspace: spec.tools.webFetch offers web_fetch; the
// model gets a page listed in allowedEgressHosts as text, a refusal for the
// metadata address, and an error result once the call cap is used up. A
// session without it gets no web_fetch tool.
func TestWebFetchFromTheWorkspace(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>Release notes</title><script>tracker()</script><p>Version 2 is out.</p>`)
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}

	enabled := fmt.Sprintf(`turns:
  - toolCalls:
      - name: web_fetch
        arguments: {url: %q}
  - expect: {lastToolResultContains: "# Release notes\n\nVersion 2 is out."}
    toolCalls:
      - name: web_fetch
        arguments: {url: "http://169.254.169.254/latest/meta-data/"}
  - expect: {lastToolResultContains: "169.254.169.254 is a link-local address"}
    toolCalls:
      - name: web_fetch
        arguments: {url: %q}
  - expect: {lastToolResultContains: "web_fetch call limit reached: this session may make at most 2 web_fetch calls"}
    text: "Done."
`, srv.URL+"/notes", srv.URL+"/notes")
	disabled := fmt.Sprintf(`turns:
  - toolCalls:
      - name: web_fetch
        arguments: {url: %q}
  - expect: {lastToolResultContains: "Unknown tool: web_fetch"}
    text: "Done."
`, srv.URL)

	tests := []struct {
		name     string
		script   string
		webFetch *agentsv1.WebFetchSpec
		calls    int32
	}{
		{"enabled", enabled, &agentsv1.WebFetchSpec{Enabled: true, MaxCalls: 2}, 3},
		{"not enabled", disabled, nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "script", Namespace: ns}, Data: map[string]string{"script.yaml": tc.script}}
			if err := testClient.Create(t.Context(), cm); err != nil {
				t.Fatalf("create script: %v", err)
			}
			s := &agentsv1.AgentSession{
				ObjectMeta: metav1.ObjectMeta{Name: uniqueName("webfetch"), Namespace: ns},
				Spec: agentsv1.AgentSessionSpec{
					Prompt: "Summarise the release notes",
					Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
						ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "script"}},
					Tools: agentsv1.ToolsSpec{WebFetch: tc.webFetch},
					// The test server listens on loopback: listing it is what lets web_fetch reach it.
					Workspace: agentsv1.WorkspaceSpec{AllowedEgressHosts: []string{u.Hostname() + ":" + u.Port()}},
				},
			}
			if err := testClient.Create(t.Context(), s); err != nil {
				t.Fatalf("create session: %v", err)
			}
			markPodReady(t, getPod(t, s))
			got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
			if got.Status.Result != "Done." || got.Status.ToolCalls != tc.calls {
				t.Errorf("result %q after %d tool calls, want Done. after %d", got.Status.Result, got.Status.ToolCalls, tc.calls)
			}
		})
	}
}
