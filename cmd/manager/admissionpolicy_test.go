package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

// repoRoot is the repository, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// install is what an install method puts into a cluster that matters to the
// admission of AgentSessions: its admission policy objects and the manager
// they are for.
type install struct {
	// policy is the ValidatingAdmissionPolicy, binding its binding.
	policy, binding *unstructured.Unstructured
	// manager is the username of the manager's service account
	// (system:serviceaccount:NAMESPACE:NAME of its Deployment).
	manager string
	// class is the manager's --session-class ("" for the default install).
	class string
}

// newInstall picks the admission policy objects and the manager's identity
// out of an install's objects. It fails the test unless there is exactly one
// manager Deployment and one ValidatingAdmissionPolicy with a binding.
func newInstall(t *testing.T, objs []*unstructured.Unstructured) install {
	t.Helper()
	var in install
	var deployments, policies, bindings []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			deployments = append(deployments, o)
		case "ValidatingAdmissionPolicy":
			policies = append(policies, o)
		case "ValidatingAdmissionPolicyBinding":
			bindings = append(bindings, o)
		}
	}
	if len(policies) != 1 || len(bindings) != 1 {
		t.Fatalf("the install has %d ValidatingAdmissionPolicies and %d bindings, want one of each", len(policies), len(bindings))
	}
	in.policy, in.binding = policies[0], bindings[0]
	if len(deployments) != 1 {
		t.Fatalf("the install has %d Deployments, want the manager's only", len(deployments))
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(deployments[0].Object, &d); err != nil {
		t.Fatalf("the manager Deployment: %v", err)
	}
	if d.Namespace == "" || d.Spec.Template.Spec.ServiceAccountName == "" {
		t.Fatalf("the manager Deployment %q has no namespace or serviceAccountName", d.Name)
	}
	in.manager = fmt.Sprintf("system:serviceaccount:%s:%s", d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--session-class="); ok {
				in.class = v
			}
		}
	}
	return in
}

// decodeYAML splits a multi-document YAML stream into objects, skipping
// documents that hold only comments.
func decodeYAML(t *testing.T, what string, b []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("read %s: %v", what, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("parse %s: %v", what, err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// kustomizeObjects reads the objects the kustomization in dir installs: the
// files its resources list and, for a directory listed, that directory's
// kustomization. It applies no transformation, so it refuses a kustomization
// with any field but resources and images (which changes only container
// images), whose objects it would read wrong.
func kustomizeObjects(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	var fields map[string]any
	if err := yaml.Unmarshal(b, &fields); err != nil {
		t.Fatalf("parse %s/kustomization.yaml: %v", dir, err)
	}
	for f := range fields {
		if f != "resources" && f != "images" {
			t.Fatalf("%s/kustomization.yaml uses %q, which this test does not apply: extend kustomizeObjects", dir, f)
		}
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("parse %s/kustomization.yaml: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
		if fi.IsDir() {
			objs = append(objs, kustomizeObjects(t, p)...)
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, decodeYAML(t, p, b)...)
	}
	return objs
}

// helmTemplate renders the chart with the helm the Makefile builds ($HELM,
// else hack/go-tool.sh at hack/versions.env's HELM_VERSION).
func helmTemplate(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	helm := os.Getenv("HELM")
	if _, err := os.Stat(helm); helm == "" || err != nil {
		env, err := os.ReadFile(filepath.Join(repoRoot, "hack", "versions.env"))
		if err != nil {
			t.Fatal(err)
		}
		var version string
		for line := range strings.Lines(string(env)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "HELM_VERSION="); ok {
				version = v
			}
		}
		var stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), filepath.Join(repoRoot, "hack", "go-tool.sh"),
			"helm", "helm.sh/helm/v3", version, "helm.sh/helm/v3/cmd/helm")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("build helm with hack/go-tool.sh: %v\n%s", err, stderr.String())
		}
		helm = strings.TrimSpace(string(out))
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), helm, append([]string{"template"}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return decodeYAML(t, "helm template", out)
}

// testSession is a top-level session of the given class ("" for none).
func testSession(name, class string) *agentsv1.AgentSession {
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant"},
		Spec: agentsv1.AgentSessionSpec{
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "m",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "script"}},
			Prompt: "hello",
		},
	}
	if class != "" {
		s.Labels = map[string]string{agentsv1.LabelClass: class}
	}
	return s
}

// The admission policy that keeps the fields making a session a child to the
// manager is the same from the Helm chart and from the kustomize install
// (config/default): a tenant who may create AgentSessions cannot pose as a
// child of another session, whichever way the operator was installed, and the
// manager the install runs (its Deployment's service account) may. Both
// installs share one API server, each with its own class, as two installs in
// one cluster do; the cases are the e2e tenancy spec's, plus the parent
// labels.
func TestAdmissionPolicyKeepsManagerOnlyFieldsToTheManager(t *testing.T) {
	sources := []struct {
		name    string
		objects func(*testing.T) []*unstructured.Unstructured
	}{
		{"chart", func(t *testing.T) []*unstructured.Unstructured {
			return helmTemplate(t, "ao-chart", filepath.Join(repoRoot, "charts", "agent-operator"),
				"--namespace", "ao-chart-system", "--set", "sessionClass=ao-chart")
		}},
		{"kustomize", func(t *testing.T) []*unstructured.Unstructured {
			return kustomizeObjects(t, filepath.Join(repoRoot, "config", "default"))
		}},
	}
	installs := make([]install, len(sources))
	for i, src := range sources {
		installs[i] = newInstall(t, src.objects(t))
	}
	if installs[0].class == installs[1].class {
		t.Fatalf("both installs serve class %q: the test needs each policy to cover its own sessions", installs[0].class)
	}

	env, admin := startBareAPIServer(t)
	installCRD(t, env)
	ctx := t.Context()
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}); err != nil {
		t.Fatal(err)
	}
	for _, in := range installs {
		for _, o := range []*unstructured.Unstructured{in.policy, in.binding} {
			if err := admin.Create(ctx, o); err != nil {
				t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	// The admission policy matches every user; its rules name usernames, so
	// RBAC is left out of the way.
	userClient := func(t *testing.T, name string) client.Client {
		t.Helper()
		u, err := env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
		if err != nil {
			t.Fatalf("add user %s: %v", name, err)
		}
		return newClient(t, u.Config())
	}
	tenant := userClient(t, "tenant")

	for i, src := range sources {
		in := installs[i]
		t.Run(src.name, func(t *testing.T) {
			denied := func(err error, message string) error {
				switch {
				case err == nil:
					return errors.New("admitted")
				case !strings.Contains(err.Error(), fmt.Sprintf("ValidatingAdmissionPolicy '%s'", in.policy.GetName())) ||
					!strings.Contains(err.Error(), message):
					return fmt.Errorf("refused, but not by %s with %q: %w", in.policy.GetName(), message, err)
				}
				return nil
			}
			victim := testSession(src.name+"-victim", in.class)
			if err := admin.Create(ctx, victim); err != nil {
				t.Fatal(err)
			}
			asChildOfVictim := func(s *agentsv1.AgentSession) {
				s.Spec.ParentRef = &agentsv1.ParentReference{Name: victim.Name, UID: string(victim.UID)}
				s.Spec.Depth = ptr.To[int32](1)
				if s.Annotations == nil {
					s.Annotations = map[string]string{}
				}
				s.Annotations[agentsv1.AnnotationSharedWorkspace] = victim.Name
			}
			// The API server enforces a policy some time after it is created.
			testenv.Eventually(t, "the policy is enforced", time.Minute, func() error {
				s := testSession(src.name+"-probe", in.class)
				asChildOfVictim(s)
				return denied(tenant.Create(ctx, s, client.DryRunAll), "spec.parentRef is set only by the agent-operator manager")
			})

			if err := tenant.Create(ctx, testSession(src.name+"-plain", in.class)); err != nil {
				t.Fatalf("the tenant may create a top-level session: %v", err)
			}

			cases := []struct {
				name, message string
				mutate        func(*agentsv1.AgentSession)
			}{
				{"parentRef", "spec.parentRef is set only by the agent-operator manager", asChildOfVictim},
				{"shared-workspace annotation", "agent-operator.dev/shared-workspace is set only by the agent-operator manager", func(s *agentsv1.AgentSession) {
					s.Annotations = map[string]string{agentsv1.AnnotationSharedWorkspace: victim.Name}
				}},
				{"parent labels", "the labels agent-operator.dev/parent and agent-operator.dev/parent-uid are set only by the agent-operator manager", func(s *agentsv1.AgentSession) {
					s.Labels[agentsv1.LabelParent] = victim.Name
					s.Labels[agentsv1.LabelParentUID] = string(victim.UID)
				}},
				{"ownerReference to a session", "an ownerReference to an AgentSession is set only by the agent-operator manager", func(s *agentsv1.AgentSession) {
					s.OwnerReferences = []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "AgentSession",
						Name: victim.Name, UID: victim.UID, Controller: ptr.To(true)}}
				}},
			}
			for _, tc := range cases {
				s := testSession(strings.ToLower(src.name+"-forged-"+strings.ReplaceAll(tc.name, " ", "-")), in.class)
				if s.Labels == nil {
					s.Labels = map[string]string{}
				}
				tc.mutate(s)
				if err := denied(tenant.Create(ctx, s), tc.message); err != nil {
					t.Errorf("a tenant's session with a %s: %v", tc.name, err)
				}
			}

			// The manager this install runs spawns children: the policy names
			// its service account.
			child := testSession(src.name+"-child", in.class)
			asChildOfVictim(child)
			child.Labels = map[string]string{agentsv1.LabelParent: victim.Name, agentsv1.LabelParentUID: string(victim.UID)}
			if in.class != "" {
				child.Labels[agentsv1.LabelClass] = in.class
			}
			child.OwnerReferences = []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "AgentSession",
				Name: victim.Name, UID: victim.UID, Controller: ptr.To(true)}}
			if err := userClient(t, in.manager).Create(ctx, child); err != nil {
				t.Errorf("the install's manager %s created a child: %v", in.manager, err)
			}

			// A child-looking session of a class no install serves is covered by
			// no policy; moving it into this install's class is refused.
			stray := testSession(src.name+"-other-class", "ao-nobody")
			asChildOfVictim(stray)
			if err := tenant.Create(ctx, stray); err != nil {
				t.Fatalf("no install serves class ao-nobody, so no policy covers it: %v", err)
			}
			moved := stray.DeepCopy()
			if in.class == "" {
				delete(moved.Labels, agentsv1.LabelClass)
			} else {
				moved.Labels[agentsv1.LabelClass] = in.class
			}
			if err := denied(tenant.Update(ctx, moved), "agent-operator.dev/class is fixed when a session is created"); err != nil {
				t.Errorf("the tenant moved a forged child into class %q: %v", in.class, err)
			}
		})
	}
	if t.Failed() {
		return
	}
	// The kustomize install's policy is the chart's rendered for its manager:
	// the same rules, only the names and the scope differ.
	if a, b := validations(t, installs[0].policy), validations(t, installs[1].policy); !slices.Equal(a, b) {
		t.Errorf("the chart's and config/default's policies have different validations:\n%q\n%q", a, b)
	}
}

// validations is a ValidatingAdmissionPolicy's validation expressions.
func validations(t *testing.T, policy *unstructured.Unstructured) []string {
	t.Helper()
	vs, _, err := unstructured.NestedSlice(policy.Object, "spec", "validations")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vs {
		e, _ := v.(map[string]any)["expression"].(string)
		out = append(out, e)
	}
	if len(out) == 0 {
		t.Fatal("a ValidatingAdmissionPolicy without validations")
	}
	return out
}
