package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// keySecret is the Reader of a session whose API key is in Secret "llm",
// key "api-key".
type keySecret struct{ key string }

func (k keySecret) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	sec, ok := obj.(*corev1.Secret)
	if !ok || key.Name != "llm" {
		return fmt.Errorf("unexpected read of %T %s", obj, key)
	}
	sec.Name, sec.Labels = key.Name, map[string]string{LabelLLMCredentials: "true"}
	sec.Data = map[string][]byte{"api-key": []byte(k.key)}
	return nil
}

func (keySecret) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("unexpected list")
}

// TestStatusNeverShowsTheAPIKey runs sessions whose model says the API key,
// or fails with an error that holds it, and checks that the progress the
// status is written from shows the redaction marker instead, as the journal
// does.
func TestStatusNeverShowsTheAPIKey(t *testing.T) {
	const key = "sk-test-0123456789abcdef"
	tests := []struct {
		name      string
		turns     []scripted.Turn
		wantPhase agentsv1.Phase
		// text is the progress field that would hold the key.
		text func(Progress) string
	}{
		{
			name:      "final text",
			turns:     []scripted.Turn{{Text: "The key is " + key + "."}},
			wantPhase: agentsv1.PhaseSucceeded,
			text:      func(p Progress) string { return p.Result },
		},
		{
			name: "model error",
			turns: []scripted.Turn{{Error: &scripted.Error{Kind: llm.KindAuthentication, StatusCode: 401,
				Message: "Incorrect API key provided: " + key}}},
			wantPhase: agentsv1.PhaseFailed,
			text:      func(p Progress) string { return p.Error },
		},
	}
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotKey string
			r, err := New(Options{
				Reader:   keySecret{key: key},
				Journals: pub,
				Clients: func(_ context.Context, cc ClientConfig) (loop.Client, error) {
					gotKey = cc.APIKey
					return scripted.New(&scripted.Script{Turns: tt.turns}, "demo"), nil
				},
				Envs: func(context.Context, *agentsv1.AgentSession, string, Driver) (tool.ExecutionEnvironment, error) {
					return localenv.New(t.TempDir())
				},
				Notify:         func(types.NamespacedName) {},
				NotifyInterval: 10 * time.Millisecond,
				Log:            logr.Discard(),
			})
			if err != nil {
				t.Fatal(err)
			}
			shutdownAtCleanup(t, r)
			obj := &agentsv1.AgentSession{
				ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("key-%d", i), UID: types.UID(fmt.Sprintf("uid-key-%d", i))},
				Spec: agentsv1.AgentSessionSpec{
					Prompt: "say the key",
					Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderAnthropic, Name: "m",
						APIKeySecretRef: &agentsv1.SecretKeyRef{Name: "llm", Key: "api-key"}},
				},
			}
			if err := r.Ensure(obj, "pod"); err != nil {
				t.Fatal(err)
			}
			end := waitProgress(t, r, obj.UID, "the session ended", func(p Progress) bool { return p.Phase.IsFinal() })
			if gotKey != key {
				t.Fatalf("the client got the key %q, want the Secret's", gotKey)
			}
			if end.Phase != tt.wantPhase {
				t.Fatalf("phase %q (error %q), want %q", end.Phase, end.Error, tt.wantPhase)
			}
			text := tt.text(end)
			if strings.Contains(text, key) || !strings.Contains(text, events.Redacted) {
				t.Errorf("progress shows %q, want the key replaced by %s", text, events.Redacted)
			}
		})
	}
}
