package agentsession

import (
	"testing"
	"time"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// spec.tools.webFetch: its bounds, its defaults and its immutability, as
// the API server enforces them.
func TestAPIServerWebFetchSpec(t *testing.T) {
	invalid := []struct {
		name string
		wf   agentsv1.WebFetchSpec
		want string
	}{
		{"zero timeout", agentsv1.WebFetchSpec{Enabled: true, Timeout: dur(0)}, "spec.tools.webFetch.timeout must be a positive duration of at most 5m"},
		{"timeout above 5m", agentsv1.WebFetchSpec{Enabled: true, Timeout: dur(10 * time.Minute)}, "spec.tools.webFetch.timeout must be a positive duration of at most 5m"},
		{"maxCalls above cap", agentsv1.WebFetchSpec{Enabled: true, MaxCalls: 5000}, "spec.tools.webFetch.maxCalls in body should be less than or equal to 1000"},
		{"maxBytes above cap", agentsv1.WebFetchSpec{Enabled: true, MaxBytes: 64 << 20}, "spec.tools.webFetch.maxBytes in body should be less than or equal to 16777216"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			s := validSession("default")
			s.Spec.Tools.WebFetch = &tc.wf
			assertInvalid(t, testClient.Create(t.Context(), s), tc.want)
		})
	}

	t.Run("defaults", func(t *testing.T) {
		s := validSession("default")
		s.Spec.Tools.WebFetch = &agentsv1.WebFetchSpec{Enabled: true}
		if err := testClient.Create(t.Context(), s); err != nil {
			t.Fatalf("create: %v", err)
		}
		t.Cleanup(func() { _ = testClient.Delete(t.Context(), s) })
		wf := s.Spec.Tools.WebFetch
		if wf.MaxCalls != 25 || wf.MaxBytes != 2<<20 || wf.Timeout == nil || wf.Timeout.Duration != 30*time.Second || wf.AllowPrivateAddresses {
			t.Errorf("defaults = %+v", wf)
		}
	})

	updates := []struct {
		name   string
		setup  func(*agentsv1.AgentSession)
		mutate func(*agentsv1.AgentSession)
	}{
		{"cannot be enabled later", nil, func(s *agentsv1.AgentSession) {
			s.Spec.Tools.WebFetch = &agentsv1.WebFetchSpec{Enabled: true}
		}},
		{"private addresses cannot be allowed later",
			func(s *agentsv1.AgentSession) { s.Spec.Tools.WebFetch = &agentsv1.WebFetchSpec{Enabled: true} },
			func(s *agentsv1.AgentSession) { s.Spec.Tools.WebFetch.AllowPrivateAddresses = true }},
		{"cannot be removed",
			func(s *agentsv1.AgentSession) { s.Spec.Tools.WebFetch = &agentsv1.WebFetchSpec{Enabled: true} },
			func(s *agentsv1.AgentSession) { s.Spec.Tools.WebFetch = nil }},
	}
	for _, tc := range updates {
		t.Run(tc.name, func(t *testing.T) {
			s := validSession("default")
			if tc.setup != nil {
				tc.setup(s)
			}
			if err := testClient.Create(t.Context(), s); err != nil {
				t.Fatalf("create valid session: %v", err)
			}
			t.Cleanup(func() { _ = testClient.Delete(t.Context(), s) })
			assertInvalid(t, updateLatest(t, s, tc.mutate), "spec.tools.webFetch is immutable")
		})
	}
}
