package agentsession

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/runner"
	"github.com/agent-operator/agent-operator/internal/urlscope"
)

// forgedChild is a session written by hand that claims parent: parentRef
// with the parent's name and UID, depth 1 and the shared-workspace
// annotation, but no ownerReference to the parent (which only the manager
// sets on the children it spawns).
func forgedChild(ns string, parent *agentsv1.AgentSession) *agentsv1.AgentSession {
	s := validSession(ns)
	s.Spec.ParentRef = &agentsv1.ParentReference{Name: parent.Name, UID: string(parent.UID)}
	s.Spec.Depth = ptr.To[int32](1)
	s.Annotations = map[string]string{agentsv1.AnnotationSharedWorkspace: parent.Name}
	return s
}

// TestForgedParentRefDoesNotShareTheParentsPod: a session that names another
// session as its parent (name, UID, annotation) but is not owned by it gets
// its own workspace pod, never the victim's.
func TestForgedParentRefDoesNotShareTheParentsPod(t *testing.T) {
	ns := newNamespace(t)
	victim := validSession(ns)
	if err := testClient.Create(t.Context(), victim); err != nil {
		t.Fatalf("create victim: %v", err)
	}
	getPod(t, victim)
	forged := forgedChild(ns, victim)
	if err := testClient.Create(t.Context(), forged); err != nil {
		t.Fatalf("create forged child: %v", err)
	}
	pod := getPod(t, forged) // its own pod, <name>-ws
	if ref := pod.OwnerReferences; len(ref) != 1 || ref[0].UID != forged.UID {
		t.Errorf("forged child's pod owned by %+v, want the forged session", ref)
	}
	eventually(t, "forged child's status names its own pod", func() error {
		g := getSession(t, ns, forged.Name)
		if g.Status.PodName != forged.Name+"-ws" {
			return fmt.Errorf("status.podName %q", g.Status.PodName)
		}
		return nil
	})
}

// TestQuotaCountsSessionsThatClaimAParent: a session with a hand-written
// parentRef is held by the namespace quota like a top-level session.
func TestQuotaCountsSessionsThatClaimAParent(t *testing.T) {
	ns := newNamespace(t)
	setMaxSessions(t, ns, "1")
	first := validSession(ns)
	if err := testClient.Create(t.Context(), first); err != nil {
		t.Fatalf("create first session: %v", err)
	}
	getPod(t, first)
	forged := forgedChild(ns, first)
	if err := testClient.Create(t.Context(), forged); err != nil {
		t.Fatalf("create forged child: %v", err)
	}
	waitPhase(t, forged, agentsv1.PhasePending, func(g *agentsv1.AgentSession) error {
		c := meta.FindStatusCondition(g.Status.Conditions, agentsv1.ConditionReady)
		if c == nil || c.Reason != agentsv1.ReasonQuotaExceeded {
			return fmt.Errorf("Ready condition %+v", c)
		}
		return nil
	})
}

// TestAPIKeyOnlyFromOptedInSecrets: a session naming a Secret that is not
// labelled as an LLM credential, or whose allowed base URLs do not cover the
// session's, fails with a ConfigError condition and no request reaches the
// base URL; a labelled Secret is used (the control).
func TestAPIKeyOnlyFromOptedInSecrets(t *testing.T) {
	const key = "sk-ant-tenancy-0123456789"
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		wantPhase   agentsv1.Phase
		wantError   string
	}{
		{name: "unlabelled", wantPhase: agentsv1.PhaseFailed, wantError: "is not opted in as an LLM API key"},
		{name: "labelled for another URL", labels: map[string]string{runner.LabelLLMCredentials: "true"},
			annotations: map[string]string{runner.AnnotationAllowedBaseURLs: "https://llm.internal.example"},
			wantPhase:   agentsv1.PhaseFailed, wantError: "may not be sent to"},
		{name: "labelled", labels: map[string]string{runner.LabelLLMCredentials: "true"}, wantPhase: agentsv1.PhaseSucceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t)
			srv := llmtest.StartScript(t, llmtest.Anthropic, &scripted.Script{Turns: []scripted.Turn{{Text: "Done."}}})
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns, Labels: tt.labels, Annotations: tt.annotations},
				StringData: map[string]string{"token": key}}
			if err := testClient.Create(t.Context(), sec); err != nil {
				t.Fatal(err)
			}
			s := validSession(ns)
			s.Spec.Model.BaseURL = srv.BaseURL()
			s.Spec.Model.APIKeySecretRef = &agentsv1.SecretKeyRef{Name: sec.Name, Key: "token"}
			if err := testClient.Create(t.Context(), s); err != nil {
				t.Fatal(err)
			}
			markPodReady(t, getPod(t, s))
			got := waitPhase(t, s, tt.wantPhase, nil)
			reqs := srv.Requests()
			if tt.wantError == "" {
				if len(reqs) == 0 || reqs[0].Header.Get("X-Api-Key") != key {
					t.Fatalf("the opted-in key was not used: %d requests", len(reqs))
				}
				return
			}
			if len(reqs) != 0 {
				t.Errorf("%d requests reached the base URL of a session whose Secret is not opted in", len(reqs))
			}
			c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionCompleted)
			if c == nil || c.Reason != agentsv1.ReasonConfigError || !strings.Contains(got.Status.Error, tt.wantError) {
				t.Errorf("Completed = %+v, error %q; want ConfigError with %q", c, got.Status.Error, tt.wantError)
			}
			if strings.Contains(got.Status.Error, key) || strings.Contains(c.Message, key) {
				t.Error("the status shows the Secret's value")
			}
		})
	}
}

// TestWorkspaceSecretsOnlyWhenOptedIn: the manager creates the workspace
// pod, so a Secret the pod would reference (an env secretKeyRef, the clone
// credentials) or an existing claim it would mount must carry its opt-in
// label; otherwise the session fails with ConfigError and no pod is
// created. Before, any Secret or claim of the namespace could be read (and
// a claim changed) from the workspace by whoever may create a session.
func TestWorkspaceSecretsOnlyWhenOptedIn(t *testing.T) {
	const value = "s3cret-workspace-0123456789"
	workspaceLabel := map[string]string{agentsv1.LabelWorkspaceSecret: "true"}
	gitLabel := map[string]string{agentsv1.LabelGitCredentials: "true"}
	limited := map[string]string{urlscope.Annotation: "https://192.0.2.9/org/"}
	env := func(optional bool) func(*agentsv1.AgentSession) {
		return func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token", Optional: ptr.To(optional)}}}}
		}
	}
	clone := func(s *agentsv1.AgentSession) {
		s.Spec.Workspace.Git = &agentsv1.GitSource{Repository: "https://192.0.2.9/org/app.git",
			CredentialsSecretRef: &corev1.LocalObjectReference{Name: "creds"}}
	}
	// claim creates the claim "work" with labels (none when create is false)
	// and points the session at it.
	claim := func(labels map[string]string, create ...bool) func(*agentsv1.AgentSession) {
		return func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Volume.PersistentVolumeClaim = &agentsv1.PVCVolume{ClaimName: "work"}
			if len(create) > 0 && !create[0] {
				return
			}
			pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: s.Namespace, Labels: labels},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
			if err := testClient.Create(t.Context(), pvc); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name        string
		secret      bool
		labels      map[string]string
		spec        func(*agentsv1.AgentSession)
		wantError   string // "": a pod is created
		annotations map[string]string
	}{
		{"env from an unlabelled Secret", true, nil, env(false), "spec.workspace.env TOKEN names secret creds, which is not opted in", nil},
		{"env from a Secret labelled for git only", true, gitLabel, env(false), "agent-operator.dev/workspace-secret=true", nil},
		{"env from an opted-in Secret", true, workspaceLabel, env(false), "", nil},
		{"env from a missing Secret", false, nil, env(false), "names secret creds, which does not exist", nil},
		{"env from a missing optional Secret", false, nil, env(true), "", nil},
		{"clone credentials unlabelled", true, nil, clone, "spec.workspace.git.credentialsSecretRef names secret creds, which is not opted in", nil},
		{"clone credentials labelled for the workspace only", true, workspaceLabel, clone, "agent-operator.dev/git-credentials=true", nil},
		{"clone credentials opted in", true, gitLabel, clone, "", nil},
		{"clone credentials limited to another host", true, gitLabel, func(s *agentsv1.AgentSession) {
			clone(s)
			s.Spec.Workspace.Git.Repository = "https://user:pw@evil.example/org/app.git"
		}, "may not be sent to https://***@evil.example/org/app.git", limited},
		{"clone credentials limited to the repository's host", true, gitLabel, clone, "", limited},
		{"a claim not opted in", false, nil, claim(nil), "claimName names claim work, which is not opted in", nil},
		{"a claim labelled as a Secret", false, nil, claim(workspaceLabel), "agent-operator.dev/workspace-volume=true", nil},
		{"a missing claim", false, nil, claim(nil, false), "names claim work, which does not exist", nil},
		{"an opted-in claim", false, nil, claim(map[string]string{agentsv1.LabelWorkspaceVolume: "true"}), "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t)
			if tt.secret {
				sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns, Labels: tt.labels, Annotations: tt.annotations},
					StringData: map[string]string{"token": value, "username": "u", "password": value}}
				if err := testClient.Create(t.Context(), sec); err != nil {
					t.Fatal(err)
				}
			}
			s := validSession(ns)
			tt.spec(s)
			if err := testClient.Create(t.Context(), s); err != nil {
				t.Fatal(err)
			}
			if tt.wantError == "" {
				getPod(t, s)
				return
			}
			got := waitPhase(t, s, agentsv1.PhaseFailed, nil)
			c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionCompleted)
			if c == nil || c.Reason != agentsv1.ReasonConfigError || !strings.Contains(got.Status.Error, tt.wantError) {
				t.Errorf("Completed = %+v, error %q; want ConfigError with %q", c, got.Status.Error, tt.wantError)
			}
			if strings.Contains(got.Status.Error, value) {
				t.Error("the status shows the Secret's value")
			}
			var pods corev1.PodList
			if err := testClient.List(t.Context(), &pods, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 0 {
				t.Errorf("%d pods created for a session whose Secret is not opted in", len(pods.Items))
			}
		})
	}
}
