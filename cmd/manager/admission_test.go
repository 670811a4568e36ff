package main

import (
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

// startBareAPIServer starts an envtest API server without the CRD: the test
// installs it, the way `helm install` does with the chart's crds/.
func startBareAPIServer(t *testing.T) (*envtest.Environment, client.Client) {
	t.Helper()
	if err := testenv.FindAssets(); err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env, newClient(t, cfg)
}

// newClient is a client for the core kinds and AgentSessions.
func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := agentsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// installCRD installs the AgentSession CRD and waits until it is served.
func installCRD(t *testing.T, env *envtest.Environment) {
	t.Helper()
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("..", "..", "config", "crd", "bases")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatalf("install the CRD: %v", err)
	}
}

// chartFinalizerPolicy is the chart's session finalizer MutatingAdmissionPolicy
// and its binding (charts/agent-operator/templates/finalizer-policy.yaml),
// with the template's CEL expression, for an install without a session class.
func chartFinalizerPolicy(t *testing.T) (*admissionv1.MutatingAdmissionPolicy, *admissionv1.MutatingAdmissionPolicyBinding) {
	t.Helper()
	tmpl, err := os.ReadFile(filepath.Join("..", "..", "charts", "agent-operator", "templates", "finalizer-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`expression: >-\n\s+(.+)\n`).FindSubmatch(tmpl)
	if m == nil {
		t.Fatal("no apply configuration expression in the chart's finalizer policy")
	}
	policy := &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "session-finalizer"},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      ptr.To(admissionv1.Ignore),
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
			MatchConstraints: &admissionv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: agentsv1.LabelClass, Operator: metav1.LabelSelectorOpDoesNotExist}}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule: admissionv1.Rule{APIGroups: []string{agentsv1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"agentsessions"}},
				}}},
			},
			Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: string(m[1])}}},
		},
	}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "session-finalizer"},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy.Name},
	}
	return policy, binding
}

func probe(check *sessionAdmission) error {
	return check.Check(httptest.NewRequest("GET", "/readyz", nil))
}

// A manager that reports ready right after its chart was installed (the CRD
// and the finalizer policy created together) must mean a session can be
// created: the policy makes creates fail with 503 until the API server has
// loaded the new CRD's schema, which `helm install --wait` did not wait for
// (a session created at once by the e2e suite's first spec failed so).
func TestReadyOnlyOnceSessionsAreAdmitted(t *testing.T) {
	env, c := startBareAPIServer(t)
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}); err != nil {
		t.Fatal(err)
	}
	policy, binding := chartFinalizerPolicy(t)
	if err := c.Create(ctx, policy); err != nil {
		t.Fatalf("create the chart's MutatingAdmissionPolicy: %v", err)
	}
	if err := c.Create(ctx, binding); err != nil {
		t.Fatalf("create its binding: %v", err)
	}
	installCRD(t, env)

	check := &sessionAdmission{Client: c, Namespace: "tenant", Log: testr.New(t)}
	notReady := 0
	testenv.Eventually(t, "the manager is ready", time.Minute, func() error {
		err := probe(check)
		if err != nil {
			notReady++
		}
		return err
	})
	t.Logf("not ready at %d probes", notReady)

	// What a user (or the suite) does as soon as `helm install --wait` returns.
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: "tenant"},
		Spec: agentsv1.AgentSessionSpec{
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "m",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "script"}},
			Prompt: "hello",
		},
	}
	if err := c.Create(ctx, s); err != nil {
		t.Fatalf("the first session created once the manager is ready: %v", err)
	}
	if !slices.Contains(s.Finalizers, agentsv1.Finalizer) {
		t.Errorf("finalizers %v: the chart's policy did not set %s", s.Finalizers, agentsv1.Finalizer)
	}
}

// The check does not keep a manager unready for what time does not mend (here
// RBAC that forbids the dry run), and once passed it asks the API server no
// more.
func TestAdmissionCheckPassesOnceForGood(t *testing.T) {
	env, _ := startBareAPIServer(t)
	installCRD(t, env)
	nobody, err := env.AddUser(envtest.User{Name: "nobody"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, requests := testenv.CountRequests(nobody.Config(), "agentsessions")
	check := &sessionAdmission{Client: newClient(t, cfg), Namespace: "default", Log: testr.New(t)}
	if err := check.admit(t.Context()); err == nil {
		t.Fatal("a user without RBAC made the dry run")
	}
	requests.Take()
	for i := range 3 {
		if err := probe(check); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	if n := requests.Take()["POST"]; n != 1 {
		t.Errorf("three probes made %d dry runs, want 1", n)
	}
}

// An API server that does not answer at all (down, as for an hour) keeps the
// manager unready, and every probe asks again: nothing is latched until it
// answers.
func TestAdmissionCheckWaitsForAnAPIServerThatIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil { // nothing listens there now
		t.Fatal(err)
	}
	cfg, requests := testenv.CountRequests(&rest.Config{Host: "http://" + addr, Timeout: 2 * time.Second}, "")
	// Without discovery (nothing answers it), the kind's mapping is given.
	scheme := runtime.NewScheme()
	if err := agentsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(agentsv1.GroupVersion.WithKind("AgentSession"), meta.RESTScopeNamespace)
	c, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	check := &sessionAdmission{Client: c, Namespace: "default", Log: testr.New(t)}
	for i := range 3 {
		if err := probe(check); err == nil {
			t.Fatalf("probe %d passed with the API server down", i)
		}
	}
	if n := requests.Take()["POST"]; n != 3 {
		t.Errorf("three probes made %d dry runs, want 3 (one each)", n)
	}
}

// The check waits out an API server that is unavailable, overloaded or not
// answering, and nothing else.
func TestRetriable(t *testing.T) {
	cases := []struct {
		code int32
		want bool
	}{
		{503, true}, {504, true}, {429, true}, {500, true}, {403, false}, {422, false}, {404, false}, {409, false},
	}
	for _, tc := range cases {
		err := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: tc.code}}
		if got := retriable(err); got != tc.want {
			t.Errorf("retriable(%d) = %v, want %v", tc.code, got, tc.want)
		}
	}
	if !retriable(os.ErrDeadlineExceeded) {
		t.Error("an error without an API status (no answer) is not retriable")
	}
}
