//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// changesRelease is the Helm release of the changes specs (see resumeRelease on collisions).
const changesRelease = "ao-changes"

// The git server of the changes specs: test/gitserver in the gitserver image (the workspace
// image's git behind net/http/cgi), basic auth, one repository seeded from a ConfigMap.
const (
	gitServerName = "gitserver"
	gitServerPort = 8080
	gitServerRoot = "/tmp/git"
	gitUser       = "e2e-pusher"
)

// gitServerImage is built by `make images` (hack/images, spec gitserver).
var gitServerImage = func() string {
	if v := os.Getenv("E2E_GITSERVER_IMAGE"); v != "" {
		return v
	}
	return "agent-operator/gitserver:dev"
}()

// gitSeed is the repository the sessions clone.
var gitSeed = map[string]string{
	"README.md": "# Demo\n\nA repository for the e2e suite.\n",
	"main.go":   "package main\n\nfunc main() { println(\"hello\") }\n",
	"util.go":   "package main\n\nfunc add(a, b int) int { return a + b }\n",
	"old.txt":   "to be deleted\n",
}

// changeScript edits two files, adds one, deletes one and runs a command; the follow-up
// (the next turns) adds a second commit.
const changeScript = `turns:
  - text: "Changing the repository."
    toolCalls:
      - name: shell
        arguments: {command: "sed -i 's/# Demo/# Demo, edited by the agent/' README.md && sed -i 's/hello/hello, agent/' main.go && mkdir -p docs && printf '# New\\n\\nAdded by the agent.\\n' > docs/new.md && rm old.txt && git status --short"}
  - text: "Changed four files."
  - text: "Following up."
    toolCalls:
      - name: shell
        arguments: {command: "printf 'second\\n' > followup.txt"}
  - text: "Second change done."
`

// idleScript changes nothing.
const idleScript = `turns:
  - text: "Nothing to change."
`

// deployGitServer runs test/gitserver in ns with the demo repository and returns the
// repository's URL (the Service's ClusterIP: the local cluster has no DNS) and the pod name.
func deployGitServer(ctx context.Context, ns, password string) (string, string) {
	GinkgoHelper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gitServerName + "-seed"}, Data: gitSeed}
	Expect(f.Client.Create(ctx, cm)).To(Succeed())
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gitServerName + "-password"},
		StringData: map[string]string{"password": password}}
	Expect(f.Client.Create(ctx, sec)).To(Succeed())
	labels := map[string]string{"app": gitServerName}
	zero := int64(0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gitServerName, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  new(bool),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   new(true),
				RunAsUser:      new(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            gitServerName,
				Image:           gitServerImage,
				ImagePullPolicy: framework.ImagePullPolicy,
				Args: []string{"-listen", fmt.Sprintf(":%d", gitServerPort), "-root", gitServerRoot,
					"-repo", "demo", "-seed", "/seed", "-user", gitUser},
				Env: []corev1.EnvVar{
					{Name: "HOME", Value: "/tmp"},
					{Name: "GITSERVER_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: sec.Name}, Key: "password"}}},
				},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: gitServerPort}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(gitServerPort)}},
					PeriodSeconds: 1,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "seed", MountPath: "/seed", ReadOnly: true}, {Name: "tmp", MountPath: "/tmp"}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: new(bool),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "seed", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	Expect(f.Client.Create(ctx, pod)).To(Succeed())
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gitServerName},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: gitServerPort, TargetPort: intstr.FromInt32(gitServerPort)}},
		},
	}
	Expect(f.Client.Create(ctx, svc)).To(Succeed())
	_, err := f.WaitForPodRunning(ctx, ns, pod.Name, 2*time.Minute)
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega, ctx context.Context) {
		p := &corev1.Pod{}
		g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(pod), p)).To(Succeed())
		ready := false
		for _, c := range p.Status.ContainerStatuses {
			ready = ready || c.Ready
		}
		g.Expect(ready).To(BeTrue(), "the git server is ready")
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	Expect(svc.Spec.ClusterIP).NotTo(BeEmpty(), "the Service's ClusterIP")
	return fmt.Sprintf("http://%s:%d/demo.git", svc.Spec.ClusterIP, gitServerPort), pod.Name
}

// serverGit runs git on the server's bare repository and returns its stdout.
func serverGit(ctx context.Context, ns, pod string, args ...string) (string, int) {
	GinkgoHelper()
	res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: pod,
		Command: append([]string{"git", "-C", gitServerRoot + "/demo.git"}, args...)})
	Expect(err).NotTo(HaveOccurred())
	return res.Stdout, res.ExitCode
}

// gitCredentials creates a Secret with the git user and password, opted in with
// agentsv1.LabelGitCredentials (clone and push credentials need it alike).
func gitCredentials(ctx context.Context, ns, name, password string) {
	GinkgoHelper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{agentsv1.LabelGitCredentials: "true"}},
		StringData: map[string]string{"username": gitUser, "password": password}}
	Expect(f.Client.Create(ctx, sec)).To(Succeed())
}

// changesSession creates a scripted session that clones repo (with the clone-creds Secret)
// and pushes with the pushSecret Secret.
func changesSession(ctx context.Context, ns, name, repo, script, pushSecret string, mutate ...func(*agentsv1.AgentSession)) *agentsv1.AgentSession {
	GinkgoHelper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-script"}, Data: map[string]string{"script.yaml": script}}
	Expect(f.Client.Create(ctx, cm)).To(Succeed())
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{framework.LabelClass: framework.SessionClass}},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Edit the README and main.go, add docs/new.md, delete old.txt.\nThen report.",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: cm.Name, Key: "script.yaml"}},
			Limits: agentsv1.Limits{MaxTurns: 10},
			Workspace: agentsv1.WorkspaceSpec{Git: &agentsv1.GitSource{
				Repository:           repo,
				CredentialsSecretRef: &corev1.LocalObjectReference{Name: "clone-creds"},
				Push: &agentsv1.GitPush{
					CredentialsSecretRef: &corev1.LocalObjectReference{Name: pushSecret},
					AuthorName:           "E2E Agent", AuthorEmail: "agent@e2e.invalid",
				},
			}},
		},
	}
	for _, m := range mutate {
		m(s)
	}
	Expect(f.Client.Create(ctx, s)).To(Succeed())
	deleteSessionAtCleanup(ns, name)
	return s
}

// waitForChanges waits until status.changes was recorded after the session last became
// idle and, when push is set, ChangesPushed has that reason.
func waitForChanges(ctx context.Context, s *agentsv1.AgentSession, notHead, pushReason string) *agentsv1.AgentSession {
	GinkgoHelper()
	got := &agentsv1.AgentSession{}
	Eventually(func(g Gomega, ctx context.Context) {
		g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", got.Status.Error)
		c := got.Status.Changes
		g.Expect(c).NotTo(BeNil(), "status.changes")
		g.Expect(c.Head).NotTo(Equal(notHead), "a new recording")
		g.Expect(c.RecordedTime).NotTo(BeNil())
		g.Expect(got.Status.IdleSince).NotTo(BeNil())
		g.Expect(c.RecordedTime.Before(got.Status.IdleSince)).To(BeFalse(), "recorded after the session went idle")
		cond := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionChangesPushed)
		g.Expect(cond).NotTo(BeNil(), "condition ChangesPushed")
		g.Expect(cond.Reason).To(Equal(pushReason), "ChangesPushed: %s", cond.Message)
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	GinkgoWriter.Printf("session %s: changes %+v\n", got.Name, *got.Status.Changes)
	return got
}

// expectNumstat checks status.changes against git diff --numstat base..head on the server.
func expectNumstat(ctx context.Context, ns, pod string, c *agentsv1.Changes) {
	GinkgoHelper()
	out, code := serverGit(ctx, ns, pod, "diff", "--numstat", "--no-renames", c.Base, c.Head)
	Expect(code).To(Equal(0))
	var files, ins, del int64
	var got, want []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		parts := strings.SplitN(line, "\t", 3)
		Expect(parts).To(HaveLen(3), "numstat line %q", line)
		a, _ := strconv.ParseInt(parts[0], 10, 64)
		d, _ := strconv.ParseInt(parts[1], 10, 64)
		files, ins, del = files+1, ins+a, del+d
		want = append(want, fmt.Sprintf("%s +%d -%d", parts[2], a, d))
	}
	for _, fc := range c.Files {
		got = append(got, fmt.Sprintf("%s +%d -%d", fc.Path, fc.Insertions, fc.Deletions))
	}
	sort.Strings(got)
	sort.Strings(want)
	Expect(got).To(Equal(want), "status.changes.files vs git diff --numstat")
	Expect([]int64{c.FilesChanged, c.Insertions, c.Deletions}).To(Equal([]int64{files, ins, del}), "the totals")
}

// A session's change leaves the sandbox: committed on agent/<name>, pushed from the operator
// to a real git server with credentials that never enter the workspace, stored as a patch
// that `kubectl agent diff` prints after the session is gone.
var _ = Describe("changes out: a pushed branch, a stored patch and artifacts", Ordered, ContinueOnFailure, Label("changes"), func() {
	op := withOperator(changesRelease, "ao-changes")
	var ns, repo, server string
	const password = "e2e-git-Pa55word-7c1f"
	const wrongPassword = "e2e-wrong-Pa55word-0b9e"

	BeforeAll(func(ctx SpecContext) {
		ns = f.SpecNamespace(ctx, "ao-changes")
		repo, server = deployGitServer(ctx, ns, password)
		gitCredentials(ctx, ns, "clone-creds", password)
		gitCredentials(ctx, ns, "push-creds", password)
		gitCredentials(ctx, ns, "wrong-creds", wrongPassword)
	}, NodeTimeout(4*time.Minute))

	diff := func(ctx context.Context, name string, args ...string) framework.PluginResult {
		GinkgoHelper()
		res, err := framework.RunPlugin(ctx, op.plugin, kubeconfig(), append([]string{"diff", "-n", ns, "--operator-namespace", op.ns, name}, args...)...)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), "kubectl agent diff: %s", res.Stderr)
		return res
	}

	It("pushes exactly the change, matches numstat and git diff, and adds a commit on follow-up", func(ctx SpecContext) {
		s := changesSession(ctx, ns, "change", repo, changeScript, "push-creds")
		got := waitForChanges(ctx, s, "", agentsv1.ReasonPushed)
		c := got.Status.Changes
		Expect(c.Branch).To(Equal("agent/change"))
		Expect(c.Pushed).To(BeTrue())

		// The branch on the server holds exactly that change, on top of the cloned commit.
		main, _ := serverGit(ctx, ns, server, "rev-parse", "main")
		Expect(c.Base).To(Equal(strings.TrimSpace(main)), "the base is the cloned commit")
		head, code := serverGit(ctx, ns, server, "rev-parse", "agent/change")
		Expect(code).To(Equal(0), "the branch exists on the server")
		Expect(strings.TrimSpace(head)).To(Equal(c.Head))
		status, _ := serverGit(ctx, ns, server, "diff", "--name-status", "--no-renames", c.Base, "agent/change")
		Expect(strings.Split(strings.TrimSpace(status), "\n")).To(ConsistOf(
			"M\tREADME.md", "M\tmain.go", "A\tdocs/new.md", "D\told.txt"))
		author, _ := serverGit(ctx, ns, server, "log", "-1", "--format=%an <%ae>%n%s", "agent/change")
		Expect(author).To(Equal("E2E Agent <agent@e2e.invalid>\nEdit the README and main.go, add docs/new.md, delete old.txt.\n"))
		expectNumstat(ctx, ns, server, c)

		// kubectl agent diff is git diff base..branch, byte for byte.
		want, _ := serverGit(ctx, ns, server, "diff", "--binary", "--full-index", "--no-renames", c.Base, "agent/change")
		Expect(diff(ctx, "change").Stdout).To(Equal(want))
		stat := diff(ctx, "change", "--stat").Stdout
		Expect(stat).To(ContainSubstring("4 files changed"))

		// The journal says so too, with a summary and no contents.
		evs, _ := sessionEvents(ctx, op, got)
		recorded := eventsOfKind(evs, loop.EventChangesRecorded)
		Expect(recorded).To(HaveLen(1))
		Expect(string(recorded[0].Data.Changes)).NotTo(ContainSubstring("Added by the agent"))

		// A follow-up adds a second commit on the same branch.
		Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
		s.Spec.Messages = append(s.Spec.Messages, agentsv1.Message{Name: "more", Kind: agentsv1.MessageFollowUp, Text: "Add followup.txt."})
		Expect(f.Client.Update(ctx, s)).To(Succeed())
		second := waitForChanges(ctx, s, c.Head, agentsv1.ReasonPushed).Status.Changes
		parent, _ := serverGit(ctx, ns, server, "rev-parse", "agent/change^")
		Expect(strings.TrimSpace(parent)).To(Equal(c.Head), "the second commit follows the first")
		Expect(second.Base).To(Equal(c.Base))
		expectNumstat(ctx, ns, server, second)
		want, _ = serverGit(ctx, ns, server, "diff", "--binary", "--full-index", "--no-renames", c.Base, "agent/change")
		Expect(diff(ctx, "change").Stdout).To(Equal(want))

		// After the session and its pod are gone, the change stays readable.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: got.Status.PodName}}
		Expect(f.Client.Delete(ctx, s)).To(Succeed())
		Expect(f.WaitForGone(ctx, s, 2*time.Minute)).To(Succeed())
		Expect(f.WaitForGone(ctx, pod, 2*time.Minute)).To(Succeed())
		Expect(diff(ctx, "change").Stdout).To(Equal(want), "kubectl agent diff after the session is deleted")
	}, SpecTimeout(10*time.Minute))

	It("reports PushFailed for wrong credentials, leaks no password, and still stores the diff", func(ctx SpecContext) {
		s := changesSession(ctx, ns, "wrong", repo, changeScript, "wrong-creds")
		got := waitForChanges(ctx, s, "", agentsv1.ReasonPushFailed)
		cond := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionChangesPushed)
		Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		Expect(strings.ToLower(cond.Message)).To(ContainSubstring("authentication"))
		Expect(got.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "a failed push does not fail the session")
		_, code := serverGit(ctx, ns, server, "rev-parse", "--verify", "-q", "refs/heads/agent/wrong")
		Expect(code).NotTo(Equal(0), "nothing was pushed")
		Expect(diff(ctx, "wrong").Stdout).To(ContainSubstring("diff --git a/README.md b/README.md"))

		// The secret scan: neither password in the session, its events, Kubernetes Events,
		// the manager's logs; the push Secret is not in the workspace pod at all.
		secrets := []string{password, wrongPassword}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(agentsv1.GroupVersion.WithKind("AgentSession"))
		Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), u)).To(Succeed())
		obj, err := json.Marshal(u.Object)
		Expect(err).NotTo(HaveOccurred())
		_, raw := sessionEvents(ctx, op, got)
		scanned := map[string]string{"the AgentSession": string(obj), "the session's events": raw}
		for _, n := range []string{ns, op.ns} {
			core, err := f.Clientset.CoreV1().Events(n).List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			b, _ := json.Marshal(core)
			scanned["core/v1 Events in "+n] = string(b)
		}
		pods, err := managerPods(ctx, op.ns, changesRelease)
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).NotTo(BeEmpty())
		for _, p := range pods {
			for _, c := range p.Spec.Containers {
				logs, err := f.Clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
				Expect(err).NotTo(HaveOccurred())
				scanned["logs of "+p.Name+"/"+c.Name] = string(logs)
			}
		}
		ws := &corev1.Pod{}
		Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.Status.PodName}, ws)).To(Succeed())
		spec, err := json.Marshal(ws.Spec)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(spec)).NotTo(ContainSubstring("wrong-creds"), "the push Secret is not in the workspace pod")
		Expect(string(spec)).NotTo(ContainSubstring("push-creds"))
		res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: got.Status.PodName, Container: "workspace",
			Command: []string{"sh", "-c", "env; cat /workspace/.git/config; ps -eo args 2>/dev/null || cat /proc/*/cmdline"}})
		Expect(err).NotTo(HaveOccurred())
		scanned["the workspace container's env, git config and processes"] = res.Stdout
		for where, text := range scanned {
			for _, secret := range secrets {
				Expect(text).NotTo(ContainSubstring(secret), "%s holds a git password", where)
			}
		}
	}, SpecTimeout(8*time.Minute))

	It("reports NothingToPush and pushes nothing for a session without edits", func(ctx SpecContext) {
		s := changesSession(ctx, ns, "idle", repo, idleScript, "push-creds")
		got := waitForChanges(ctx, s, "x", agentsv1.ReasonNothingToPush)
		Expect(got.Status.Changes.Head).To(Equal(got.Status.Changes.Base))
		Expect(got.Status.Changes.FilesChanged).To(BeZero())
		_, code := serverGit(ctx, ns, server, "rev-parse", "--verify", "-q", "refs/heads/agent/idle")
		Expect(code).NotTo(Equal(0), "no branch was pushed")
	}, SpecTimeout(5*time.Minute))

	// make bench: how long a 1 000-file change takes from the end of the input (SESSION_END)
	// to status saying the branch was pushed and the patch stored.
	It("benchmarks recording and pushing a 1 000-file change", Label("bench"), func(ctx SpecContext) {
		const script = `turns:
  - toolCalls:
      - name: shell
        arguments: {command: "mkdir -p gen && for i in $(seq 1 1000); do printf 'line %s\\n' $i > gen/f$i.txt; done && ls gen | wc -l"}
  - text: "Generated 1000 files."
`
		s := changesSession(ctx, ns, "bulk", repo, script, "push-creds")
		var pushed time.Time
		got := &agentsv1.AgentSession{}
		Eventually(func(g Gomega, ctx context.Context) {
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", got.Status.Error)
			cond := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionChangesPushed)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(agentsv1.ReasonPushed), "ChangesPushed: %s", cond.Message)
			pushed = time.Now()
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
		Expect(got.Status.Changes.FilesChanged).To(BeEquivalentTo(1000))
		evs, _ := sessionEvents(ctx, op, got)
		ends := eventsOfKind(evs, loop.EventSessionEnd)
		Expect(ends).NotTo(BeEmpty())
		took := pushed.Sub(ends[len(ends)-1].Time)
		benchRow("changes: 1 000-file change, SESSION_END -> ChangesPushed=Pushed in status (polled every 100 ms)",
			took.Round(10*time.Millisecond).String(), "< 5 s")
	}, SpecTimeout(5*time.Minute))

	It("run --output-dir writes changes.patch, changes.json and the artifacts, and cp copies one", func(ctx SpecContext) {
		script := `turns:
  - toolCalls:
      - name: shell
        arguments: {command: "mkdir -p out && echo 'report of the run' > out/report.txt && sed -i 's/hello/hi/' main.go"}
  - text: "Report written."
`
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ci-script"}, Data: map[string]string{"script.yaml": script}}
		Expect(f.Client.Create(ctx, cm)).To(Succeed())
		manifest := fmt.Sprintf(`apiVersion: agent-operator.dev/v1alpha1
kind: AgentSession
metadata: {name: ci, namespace: %[1]s, labels: {%[2]s: %[3]s}}
spec:
  prompt: Write the report.
  model: {provider: scripted, name: demo, scriptConfigMapRef: {name: ci-script, key: script.yaml}}
  outputs: ["out/*.txt"]
  workspace:
    git: {repository: %[4]q, credentialsSecretRef: {name: clone-creds}}
`, ns, framework.LabelClass, framework.SessionClass, repo)
		path := filepath.Join(GinkgoT().TempDir(), "ci.yaml")
		Expect(os.WriteFile(path, []byte(manifest), 0o600)).To(Succeed())
		deleteSessionAtCleanup(ns, "ci")
		dir := filepath.Join(GinkgoT().TempDir(), "out")
		res, err := framework.RunPlugin(ctx, op.plugin, kubeconfig(), "run", "-n", ns, "--operator-namespace", op.ns,
			"-F", path, "--output-dir", dir, "--timeout", "4m")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), "kubectl agent run --output-dir: %s", res.Stderr)
		patch, err := os.ReadFile(filepath.Join(dir, "changes.patch"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(patch)).To(ContainSubstring("+func main() { println(\"hi\") }"))
		var c agentsv1.Changes
		data, err := os.ReadFile(filepath.Join(dir, "changes.json"))
		Expect(err).NotTo(HaveOccurred())
		Expect(json.Unmarshal(data, &c)).To(Succeed())
		Expect(c.Artifacts).To(BeEquivalentTo(1))
		Expect(os.ReadFile(filepath.Join(dir, "artifacts", "out", "report.txt"))).To(Equal([]byte("report of the run\n")))

		dest := GinkgoT().TempDir()
		cp, err := framework.RunPlugin(ctx, op.plugin, kubeconfig(), "cp", "-n", ns, "--operator-namespace", op.ns, "ci:out/report.txt", dest)
		Expect(err).NotTo(HaveOccurred())
		Expect(cp.ExitCode).To(Equal(0), "kubectl agent cp: %s", cp.Stderr)
		Expect(os.ReadFile(filepath.Join(dest, "report.txt"))).To(Equal([]byte("report of the run\n")))
	}, SpecTimeout(6*time.Minute))

	It("rejects invalid branch names and outputs globs escaping the workspace at admission", func(ctx SpecContext) {
		for _, tc := range []struct {
			name   string
			mutate func(*agentsv1.AgentSession)
			want   string
		}{
			{"bad-branch", func(s *agentsv1.AgentSession) { s.Spec.Workspace.Git.Push.Branch = "agent/..x" }, "valid git branch name"},
			{"bad-branch-lock", func(s *agentsv1.AgentSession) { s.Spec.Workspace.Git.Push.Branch = "x.lock" }, "valid git branch name"},
			{"bad-glob", func(s *agentsv1.AgentSession) { s.Spec.Outputs = []string{"../../etc/passwd"} }, "spec.outputs"},
			{"abs-glob", func(s *agentsv1.AgentSession) { s.Spec.Outputs = []string{"/etc/*"} }, "spec.outputs"},
		} {
			s := &agentsv1.AgentSession{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tc.name},
				Spec: agentsv1.AgentSessionSpec{Prompt: "p",
					Model:     agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo", ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "x", Key: "script.yaml"}},
					Workspace: agentsv1.WorkspaceSpec{Git: &agentsv1.GitSource{Repository: repo, Push: &agentsv1.GitPush{}}}},
			}
			tc.mutate(s)
			err := f.Client.Create(ctx, s)
			Expect(err).To(HaveOccurred(), tc.name)
			Expect(err.Error()).To(ContainSubstring(tc.want), tc.name)
		}
	}, SpecTimeout(time.Minute))
})
