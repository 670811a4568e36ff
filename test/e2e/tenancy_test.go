//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// tenancyRelease is the release of the tenancy specs; its rbac.sessionNamespaces lists only
// the tenant namespace the specs create before installing.
const tenancyRelease = "ao-tenancy"

// tenantSA is the ServiceAccount, in the tenant namespace, allowed only to create, get and
// patch AgentSessions there.
const tenantSA = "tenant"

// Issue 16: a user allowed to create AgentSessions in one namespace reaches nothing further.
var _ = Describe("tenancy", Ordered, ContinueOnFailure, Label("security", "tenancy"), func() {
	var (
		opNS, tenantNS, otherNS string
		tenant                  client.Client
	)

	BeforeAll(func(ctx SpecContext) {
		for _, p := range []*string{&tenantNS, &otherNS} {
			ns, err := f.CreateNamespace(ctx, "ao-tenant")
			Expect(err).NotTo(HaveOccurred())
			*p = ns.Name
			DeferCleanup(func(ctx context.Context) { Expect(f.DeleteNamespace(ctx, ns.Name)).To(Succeed()) }, NodeTimeout(3*time.Minute))
		}
		opNS = installOperator(ctx, tenancyRelease, "ao-tenancy", "rbac.sessionNamespaces={"+tenantNS+"}")
		tenant = tenantClient(ctx, tenantNS)
	}, NodeTimeout(6*time.Minute))

	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			for _, ns := range []string{opNS, tenantNS} {
				if ns != "" {
					f.DumpNamespace(ctx, ns, GinkgoWriter)
				}
			}
		}
	})

	It("rejects a parentRef, depth or shared-workspace annotation from a tenant at admission, and sets the finalizer of its own class only", func(ctx SpecContext) {
		victim := scriptedSession(ctx, tenantNS, "victim", helloScript)
		Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(victim), victim)).To(Succeed())

		// The control: the tenant may create a top-level session.
		plain := tenantSession(tenantNS, "tenant-plain", victim.Spec.Model.ScriptConfigMapRef.Name)
		Expect(tenant.Create(ctx, plain)).To(Succeed(), "the tenant may create a top-level session")
		deleteSessionAtCleanup(tenantNS, plain.Name)
		// The API server sets the finalizer of the install's sessions as they are created (its
		// MutatingAdmissionPolicy), so the controller makes no write for it on a start's path.
		Expect(plain.Finalizers).To(ContainElement(agentsv1.Finalizer), "the create's response carries the finalizer")

		cases := []struct {
			name, message string
			mutate        func(*agentsv1.AgentSession)
		}{
			{"parentRef", "spec.parentRef is set only by the agent-operator manager", func(s *agentsv1.AgentSession) {
				s.Spec.ParentRef = &agentsv1.ParentReference{Name: victim.Name, UID: string(victim.UID)}
				s.Spec.Depth = ptr.To[int32](1)
				s.Annotations = map[string]string{agentsv1.AnnotationSharedWorkspace: victim.Name}
			}},
			{"shared-workspace annotation", "agent-operator.dev/shared-workspace is set only by the agent-operator manager", func(s *agentsv1.AgentSession) {
				s.Annotations = map[string]string{agentsv1.AnnotationSharedWorkspace: victim.Name}
			}},
			{"ownerReference to a session", "an ownerReference to an AgentSession is set only by the agent-operator manager", func(s *agentsv1.AgentSession) {
				s.OwnerReferences = []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "AgentSession",
					Name: victim.Name, UID: victim.UID, Controller: ptr.To(true)}}
			}},
		}
		for _, tc := range cases {
			s := tenantSession(tenantNS, "forged-"+strings.ReplaceAll(tc.name, " ", "-"), victim.Spec.Model.ScriptConfigMapRef.Name)
			s.Name = strings.ToLower(s.Name)
			tc.mutate(s)
			err := tenant.Create(ctx, s)
			Expect(err).To(HaveOccurred(), "a tenant's session with a %s was admitted", tc.name)
			Expect(err.Error()).To(And(ContainSubstring("ValidatingAdmissionPolicy"), ContainSubstring(tc.message)), tc.name)
		}

		// Each install's policy covers only its own class (issue 15), so a tenant can create a
		// child-looking session under a class no install serves; it stays inert, and moving it
		// to a served class afterwards is refused.
		stray := tenantSession(tenantNS, "forged-other-class", victim.Spec.Model.ScriptConfigMapRef.Name)
		stray.Labels = map[string]string{agentsv1.LabelClass: "ao-nobody"}
		stray.Spec.ParentRef = &agentsv1.ParentReference{Name: victim.Name, UID: string(victim.UID)}
		stray.Spec.Depth = ptr.To[int32](1)
		stray.Annotations = map[string]string{agentsv1.AnnotationSharedWorkspace: victim.Name}
		Expect(tenant.Create(ctx, stray)).To(Succeed(), "no install serves class ao-nobody, so no policy covers it")
		deleteSessionAtCleanup(tenantNS, stray.Name)
		Expect(stray.Finalizers).To(BeEmpty(), "a session of a class no install serves got a finalizer nobody removes")
		moved := stray.DeepCopy()
		moved.Labels[agentsv1.LabelClass] = framework.SessionClass
		err := tenant.Patch(ctx, moved, client.MergeFrom(stray))
		Expect(err).To(HaveOccurred(), "a tenant moved a forged child into the served class")
		Expect(err.Error()).To(And(ContainSubstring("ValidatingAdmissionPolicy"),
			ContainSubstring("agent-operator.dev/class is fixed when a session is created")))
	}, SpecTimeout(3*time.Minute))

	It("does not send an unlabelled Secret anywhere: the session fails with a ConfigError", func(ctx SpecContext) {
		const key = "sk-e2e-tenancy-unlabelled-0123"
		root := deployLLMServer(ctx, tenantNS, map[string]string{"exfil": "turns:\n  - text: \"You should not see this.\"\n"})
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "unrelated-credentials"},
			StringData: map[string]string{"token": key}}
		Expect(f.Client.Create(ctx, sec)).To(Succeed())

		s := &agentsv1.AgentSession{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "exfil"},
			Spec: agentsv1.AgentSessionSpec{
				Prompt: "Say hello.",
				Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderAnthropic, Name: "claude-sonnet-4-5",
					BaseURL:         root + "/exfil/anthropic",
					APIKeySecretRef: &agentsv1.SecretKeyRef{Name: sec.Name, Key: "token"}},
			},
		}
		Expect(tenant.Create(ctx, s)).To(Succeed())
		deleteSessionAtCleanup(tenantNS, s.Name)

		final := waitForOutcome(ctx, s, 3*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseFailed))
		c := meta.FindStatusCondition(final.Status.Conditions, agentsv1.ConditionCompleted)
		Expect(c).NotTo(BeNil())
		Expect(c.Reason).To(Equal(agentsv1.ReasonConfigError))
		Expect(final.Status.Error).To(ContainSubstring("is not opted in as an LLM API key"))
		Expect(final.Status.Error).NotTo(ContainSubstring(key))
		Expect(llmRequests(ctx, tenantNS)).To(BeEmpty(), "no request reached the session's base URL")
	}, SpecTimeout(5*time.Minute))

	It("refuses NATS connections without credentials, and a reader of one namespace reads only it, keeping its credential secret", func(ctx SpecContext) {
		pods, err := managerPods(ctx, opNS, tenancyRelease)
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).NotTo(BeEmpty())
		pod := &pods[0]
		natsPort := forwardToPod(ctx, pod.Namespace, pod.Name, 4222)
		credsPort := forwardToPod(ctx, pod.Namespace, pod.Name, 8443)
		natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)

		_, err = nats.Connect(natsURL, nats.NoReconnect())
		Expect(err).To(HaveOccurred(), "a connection without credentials")
		Expect(strings.ToLower(err.Error())).To(ContainSubstring("authorization"))

		// A session in the tenant namespace to read, whose shell scans for the credential below.
		cred := readerCredentialFor(ctx, credsPort, tenantNS)
		Expect(cred.Namespace).To(Equal(tenantNS))
		script := fmt.Sprintf(`turns:
  - toolCalls:
      - name: shell
        arguments: {command: "env; cat /proc/1/environ /proc/1/cmdline 2>/dev/null | tr '\\0' '\\n'; echo env-done"}
  - expect: {lastToolResultContains: "env-done"}
    toolCalls:
      - name: shell
        arguments: {command: "timeout 60 grep -rasoE 'reader-[0-9a-f]{32}|%[1]s' /workspace /tmp /etc /run /proc/self/environ /proc/1/environ 2>/dev/null | head -n 20; echo scan-done", timeout_ms: 90000}
  - expect: {lastToolResultContains: "scan-done"}
    text: "Scan finished."
`, cred.Password)
		s := scriptedSession(ctx, tenantNS, "natsscan", script)
		final := waitForOutcome(ctx, s, 3*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)

		// A fresh port-forward: the server's refusal of the unauthenticated connection above can
		// end the first forwarder (client-go stops forwarding on a stream error).
		natsURL = fmt.Sprintf("nats://127.0.0.1:%d", forwardToPod(ctx, pod.Namespace, pod.Name, 4222))
		nc, err := events.Connect(ctx, natsURL, events.ConnectOptions{Name: "e2e-reader", Reader: cred})
		Expect(err).NotTo(HaveOccurred())
		defer nc.Close()
		violations := make(chan error, 8)
		nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err })
		js, err := jetstream.New(nc)
		Expect(err).NotTo(HaveOccurred())
		evs, err := events.Replay(ctx, js, events.SessionRef{Namespace: tenantNS, Name: s.Name, UID: string(final.UID)})
		Expect(err).NotTo(HaveOccurred(), "the reader replays its namespace")
		ends := eventsOfKind(evs, loop.EventToolCallEnd)
		Expect(ends).To(HaveLen(2))
		Expect(ends[1].Data.Output).To(HaveSuffix("\nOutput:\nscan-done\n"), "the workspace holds no NATS credential")
		for _, e := range ends {
			Expect(e.Data.Output).NotTo(ContainSubstring(cred.Password))
		}

		_, err = nc.SubscribeSync("agents." + otherNS + ".>")
		Expect(err).NotTo(HaveOccurred())
		Expect(nc.Publish("agents."+tenantNS+"."+s.Name+".user_input", []byte(`{"forged":true}`))).To(Succeed())
		Expect(nc.Flush()).To(Succeed())
		for range 2 {
			var v error
			Eventually(violations).WithTimeout(10 * time.Second).Should(Receive(&v))
			Expect(strings.ToLower(v.Error())).To(ContainSubstring("permissions violation"))
		}

		// The credential is nowhere else: the session, the Events of both namespaces, the manager's logs.
		obj, err := json.Marshal(final)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(obj)).NotTo(ContainSubstring(cred.Password), "the AgentSession")
		for _, n := range []string{tenantNS, opNS} {
			core, err := f.Clientset.CoreV1().Events(n).List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			b, err := json.Marshal(core)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(b)).NotTo(ContainSubstring(cred.Password), "Events in %s", n)
		}
		for _, c := range pod.Spec.Containers {
			logs, err := f.Clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(logs)).NotTo(ContainSubstring(cred.Password), "logs of %s", c.Name)
			Expect(string(logs)).To(ContainSubstring("Issued a reader credential"), "the manager logged the decision")
		}
		spec, err := json.Marshal(pod.Spec)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(spec)).NotTo(MatchRegexp(`(?i)nats[-_]?(token|password|creds)`), "the manager pod holds no NATS secret")
	}, SpecTimeout(6*time.Minute))

	It("gives the manager only the rights it uses (kubectl auth can-i)", func(ctx SpecContext) {
		manager := "system:serviceaccount:" + opNS + ":" + tenancyRelease + "-agent-operator"
		cases := []struct {
			args []string
			want string
		}{
			{[]string{"get", "secrets", "-n", tenantNS}, "yes"},
			{[]string{"get", "secrets", "-n", otherNS}, "no"},
			{[]string{"list", "secrets", "-n", tenantNS}, "no"},
			// "pods/exec" as one word is read by kubectl as a resource named so; the
			// subresource needs --subresource (checked: a role with create pods only
			// answers yes to "create pods/exec" and no to this).
			{[]string{"create", "pods", "--subresource=exec", "-n", tenantNS}, "yes"},
			{[]string{"create", "pods", "--subresource=exec", "-n", otherNS}, "no"},
			{[]string{"update", "leases.coordination.k8s.io", "-n", opNS}, "yes"},
			{[]string{"get", "leases.coordination.k8s.io", "-n", tenantNS}, "yes"}, // session claims (issue 15)
			{[]string{"get", "leases.coordination.k8s.io", "-n", otherNS}, "no"},
			{[]string{"create", "leases.coordination.k8s.io", "-n", "kube-system"}, "no"},
			{[]string{"create", "agentsessions.agent-operator.dev", "-n", otherNS}, "yes"},
			{[]string{"delete", "namespaces"}, "no"},
		}
		for _, tc := range cases {
			args := append([]string{"auth", "can-i", "--as", manager}, tc.args...)
			out, err := kubectl(ctx, "", args...)
			got := strings.TrimSpace(out)
			if tc.want == "yes" {
				Expect(err).NotTo(HaveOccurred(), "kubectl %s", strings.Join(args, " "))
			}
			Expect(got).To(Equal(tc.want), "kubectl %s", strings.Join(args, " "))
		}
	}, SpecTimeout(2*time.Minute))
})

// tenantClient creates the tenant ServiceAccount of ns with a Role allowing only create and get
// of AgentSessions, and returns a client impersonating it.
func tenantClient(ctx context.Context, ns string) client.Client {
	GinkgoHelper()
	Expect(f.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenantSA}})).To(Succeed())
	Expect(f.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenantSA},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{agentsv1.GroupVersion.Group}, Resources: []string{"agentsessions"},
			Verbs: []string{"create", "get", "patch"}}},
	})).To(Succeed())
	Expect(f.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenantSA},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: tenantSA},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: tenantSA}},
	})).To(Succeed())
	cfg := rest.CopyConfig(f.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + tenantSA,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	cw, err := client.NewWithWatch(cfg, client.Options{Scheme: f.Scheme})
	c := framework.WithSessionClass(cw, f.Scheme)
	Expect(err).NotTo(HaveOccurred())
	return c
}

// tenantSession is a scripted top-level session replaying the ConfigMap script.
func tenantSession(ns, name, script string) *agentsv1.AgentSession {
	return &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Say hello.",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: script}},
		},
	}
}

// readerCredentialFor asks the manager's endpoint (forwarded to local) for a reader credential
// of ns with the suite's own kubeconfig credentials, as kubectl agent does.
func readerCredentialFor(ctx context.Context, local uint16, ns string) *events.ReaderCredential {
	GinkgoHelper()
	tlsCfg, err := rest.TLSConfigFor(f.Config)
	Expect(err).NotTo(HaveOccurred())
	if tlsCfg == nil {
		tlsCfg = &tls.Config{}
	}
	tlsCfg.RootCAs, tlsCfg.ServerName, tlsCfg.InsecureSkipVerify = nil, "", true
	rt, err := rest.HTTPWrappersForConfig(f.Config, &http.Transport{TLSClientConfig: tlsCfg})
	Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("https://127.0.0.1:%d%s?namespace=%s", local, events.CredentialsPath, ns), nil)
	Expect(err).NotTo(HaveOccurred())
	resp, err := (&http.Client{Transport: rt}).Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.StatusCode).To(Equal(http.StatusOK), "reader credential: %s", body)
	cred := &events.ReaderCredential{}
	Expect(json.Unmarshal(body, cred)).To(Succeed())
	return cred
}
