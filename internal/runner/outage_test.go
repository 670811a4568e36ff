package runner

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// A provider down for an hour: the session waits (paused, ModelUnavailable
// naming the provider and the last error, the key redacted) as long as the
// tolerance allows, and fails with ModelUnavailable once it is used up. The
// clock is the runner's, so the hour passes at once.
func TestModelDownForAnHourPausesThenFailsAtTheTolerance(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tolerance *metav1.Duration
		down      time.Duration
		want      inputOutcome
	}{
		{"default tolerance (1h), down 59 min", nil, 59 * time.Minute, inputPaused},
		{"default tolerance (1h), down 61 min", nil, 61 * time.Minute, inputStop},
		{"tolerance 5m, down 6 min", &metav1.Duration{Duration: 5 * time.Minute}, 6 * time.Minute, inputStop},
		{"tolerance 0s fails at the first outage", &metav1.Duration{}, 0, inputStop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			r := &Runner{opts: Options{Notify: func(types.NamespacedName) {}, NotifyInterval: time.Hour, Now: func() time.Time { return now }}}
			obj := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u"}}
			obj.Spec.Model.Provider = agentsv1.ProviderAnthropic
			obj.Spec.Limits.ModelOutageTolerance = tc.tolerance
			s := newSession(r, obj, "pod")
			s.redactor = events.NewRedactor("sk-secret-key")
			outage := fmt.Errorf("call model: %w: %w", loop.ErrModelUnavailable,
				&llm.Error{Kind: llm.KindServer, Provider: "anthropic", StatusCode: 529, Message: "Overloaded (key sk-secret-key)"})

			got := s.modelUnavailable(outage) // the first failed round
			if tc.down > 0 {
				if got != inputPaused {
					t.Fatalf("first outage: %v, want paused", got)
				}
				p := s.snapshot()
				if !strings.Contains(p.ModelUnavailable, "anthropic") || !strings.Contains(p.ModelUnavailable, "529") ||
					strings.Contains(p.ModelUnavailable, "sk-secret-key") || !p.ModelUnavailableSince.Equal(now) {
					t.Fatalf("progress while waiting: %q since %v", p.ModelUnavailable, p.ModelUnavailableSince)
				}
				now = now.Add(tc.down)
				got = s.modelUnavailable(outage) // the round after the provider was down that long
			}
			if got != tc.want {
				t.Fatalf("after %s down: %v, want %v", tc.down, got, tc.want)
			}
			p := s.snapshot()
			if tc.want == inputStop {
				if p.Phase != agentsv1.PhaseFailed || p.Reason != agentsv1.ReasonModelUnavailable ||
					!strings.Contains(p.Error, "modelOutageTolerance") || strings.Contains(p.Error, "sk-secret-key") {
					t.Errorf("failed as %s/%s: %q", p.Phase, p.Reason, p.Error)
				}
			} else if p.Phase == agentsv1.PhaseFailed {
				t.Errorf("failed within the tolerance: %q", p.Error)
			}
		})
	}
}

// The wait between retries doubles from Initial and stays at Max; a model
// that answered starts it over.
func TestOutageBackoffDoublesUpToItsCap(t *testing.T) {
	b := Backoff{Initial: 10 * time.Second, Max: 2 * time.Minute}
	var got []time.Duration
	for range 6 {
		got = append(got, b.next())
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 2 * time.Minute, 2 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	b.reset()
	if d := b.next(); d != 10*time.Second {
		t.Errorf("after reset: %s, want 10s", d)
	}
}
