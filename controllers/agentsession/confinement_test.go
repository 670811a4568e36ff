package agentsession

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// TestWorkspacePodLabelsRestored: the labels of a running session's pod
// that its NetworkPolicy selects it by (session UID) and the manager's cache
// watches it by (managed-by) are written back when someone removes them,
// with a Warning Event, and the session goes on. Before, a pod without its
// session-UID label was unconfined for good, and one without managed-by
// dropped out of the cache: a running session was taken for lost.
func TestWorkspacePodLabelsRestored(t *testing.T) {
	ns := newNamespace(t)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "hold", Namespace: ns},
		Data: map[string]string{"script.yaml": `turns:
  - toolCalls:
      - name: shell
        arguments: {command: "while [ ! -f release ]; do sleep 0.05; done", timeout_ms: 120000}
  - text: "Released."
`},
	}
	if err := testClient.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("labels"), Namespace: ns},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Wait for the release file",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: cm.Name}},
		},
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	pod := getPod(t, s)
	markPodReady(t, pod)
	running := waitPhase(t, s, agentsv1.PhaseRunning, nil)

	for _, label := range []string{agentsv1.LabelSessionUID, labelManagedBy} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, label)
		if err := testClient.Patch(t.Context(), pod, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("remove %s: %v", label, err)
		}
		eventually(t, "label "+label+" written back", func() error {
			got := &corev1.Pod{}
			if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(pod), got); err != nil {
				return err
			}
			if got.Labels[agentsv1.LabelSessionUID] != string(running.UID) || got.Labels[labelManagedBy] != managedBy {
				return fmt.Errorf("labels %v", got.Labels)
			}
			return nil
		})
	}
	waitWarning(t, ns, running.UID, ReasonPodLabelsRestored)
	got := &agentsv1.AgentSession{}
	if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != agentsv1.PhaseRunning {
		t.Fatalf("phase %s (%s), want the session still Running", got.Status.Phase, got.Status.Error)
	}
	dir, err := workspaces.dir(got)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
}
