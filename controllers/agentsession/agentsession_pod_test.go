package agentsession

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
)

var testImages = Images{Workspace: "ws:dev", Executor: "exec:dev", PullPolicy: corev1.PullIfNotPresent}

func session(mutate func(*agentsv1.AgentSession)) *agentsv1.AgentSession {
	s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: "fix-bug", Namespace: "team", UID: "u-1"}}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func TestBuildPod(t *testing.T) {
	cases := []struct {
		name  string
		spec  func(*agentsv1.AgentSession)
		check func(t *testing.T, pod *corev1.Pod)
	}{
		{"defaults", nil, func(t *testing.T, pod *corev1.Pod) {
			if pod.Name != "fix-bug-ws" || pod.Labels[agentsv1.LabelSessionUID] != "u-1" {
				t.Errorf("name/labels = %s %v", pod.Name, pod.Labels)
			}
			c := pod.Spec.Containers[0]
			if c.Image != "ws:dev" || c.Name != "workspace" || c.WorkingDir != "/workspace" {
				t.Errorf("container = %s %s %s", c.Image, c.Name, c.WorkingDir)
			}
			if pod.Spec.Volumes[0].EmptyDir == nil || len(pod.Spec.InitContainers) != 1 {
				t.Errorf("want emptyDir workspace and one init container: %+v", pod.Spec)
			}
			if !*pod.Spec.SecurityContext.RunAsNonRoot || *pod.Spec.SecurityContext.RunAsUser != 65532 {
				t.Errorf("pod security context = %+v", pod.Spec.SecurityContext)
			}
		}},
		{"the change baseline is recorded at the pod's start", nil, func(t *testing.T, pod *corev1.Pod) {
			h := pod.Spec.Containers[0].Lifecycle
			if h == nil || h.PostStart == nil || h.PostStart.Exec == nil ||
				!slices.Equal(h.PostStart.Exec.Command, changes.PodStartCommand("/agent/bin/executor-sidecar", "/workspace")) {
				t.Errorf("workspace container lifecycle %+v: want the baseline in a postStart hook", h)
			}
		}},
		{"image and resources from the spec", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Image = "golang:1.26"
			s.Spec.Workspace.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}}
			s.Spec.Workspace.RuntimeClassName = ptr.To("gvisor")
		}, func(t *testing.T, pod *corev1.Pod) {
			c := pod.Spec.Containers[0]
			if c.Image != "golang:1.26" || c.Resources.Limits.Memory().String() != "8Gi" || *pod.Spec.RuntimeClassName != "gvisor" {
				t.Errorf("container = %s %v %v", c.Image, c.Resources, pod.Spec.RuntimeClassName)
			}
		}},
		{"init containers request no more than a small workspace", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("128Mi")}}
			s.Spec.Workspace.Git = &agentsv1.GitSource{Repository: "https://example.com/r.git"}
		}, func(t *testing.T, pod *corev1.Pod) {
			if len(pod.Spec.InitContainers) != 2 {
				t.Fatalf("init containers = %+v", pod.Spec.InitContainers)
			}
			for _, c := range pod.Spec.InitContainers {
				if c.Resources.Requests.Cpu().String() != "2m" || c.Resources.Requests.Memory().String() != "16Mi" {
					t.Errorf("init container %s requests %v, want the workspace's 2m and 16Mi", c.Name, c.Resources.Requests)
				}
				if c.Resources.Limits.Cpu().String() != "1" || c.Resources.Limits.Memory().String() != "512Mi" {
					t.Errorf("init container %s limits %v, want 1 and 512Mi", c.Name, c.Resources.Limits)
				}
			}
		}},
		{"init containers keep their requests below a large workspace's", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}}
		}, func(t *testing.T, pod *corev1.Pod) {
			c := pod.Spec.InitContainers[0]
			if c.Resources.Requests.Cpu().String() != "50m" || c.Resources.Requests.Memory().String() != "64Mi" {
				t.Errorf("init container %s requests %v, want 50m and 64Mi", c.Name, c.Resources.Requests)
			}
		}},
		{"new pvc", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Volume.PersistentVolumeClaim = &agentsv1.PVCVolume{Size: ptr.To(resource.MustParse("5Gi"))}
		}, func(t *testing.T, pod *corev1.Pod) {
			if v := pod.Spec.Volumes[0].PersistentVolumeClaim; v == nil || v.ClaimName != "fix-bug-workspace" {
				t.Errorf("workspace volume = %+v", pod.Spec.Volumes[0])
			}
		}},
		{"git credentials only in the clone container", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Git = &agentsv1.GitSource{Repository: "https://example.com/r.git", Ref: "main",
				CredentialsSecretRef: &corev1.LocalObjectReference{Name: "git"}}
		}, func(t *testing.T, pod *corev1.Pod) {
			if len(pod.Spec.InitContainers) != 2 || pod.Spec.InitContainers[1].Name != "git-clone" {
				t.Fatalf("init containers = %+v", pod.Spec.InitContainers)
			}
			mounted := func(c corev1.Container) bool {
				return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volGitCreds })
			}
			if !mounted(pod.Spec.InitContainers[1]) || mounted(pod.Spec.InitContainers[0]) || mounted(pod.Spec.Containers[0]) {
				t.Error("git credentials must be mounted into the clone container only")
			}
			if p := pod.Spec.InitContainers[1].TerminationMessagePolicy; p != corev1.TerminationMessageFallbackToLogsOnError {
				t.Errorf("clone termination message policy %q: a failed clone's log must reach status", p)
			}
		}},
		{"git trusts /workspace in the clone and the workspace, the user's env last", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Git = &agentsv1.GitSource{Repository: "https://example.com/r.git"}
			s.Spec.Workspace.Env = []corev1.EnvVar{{Name: "GIT_CONFIG_COUNT", Value: "0"}}
		}, func(t *testing.T, pod *corev1.Pod) {
			for _, c := range []corev1.Container{pod.Spec.InitContainers[1], pod.Spec.Containers[0]} {
				env := map[string]string{}
				var order []string
				for _, e := range c.Env {
					env[e.Name] = e.Value
					order = append(order, e.Name)
				}
				if env["GIT_CONFIG_KEY_0"] != "safe.directory" || env["GIT_CONFIG_VALUE_0"] != "/workspace" {
					t.Errorf("%s env %v: git would refuse /workspace (dubious ownership)", c.Name, env)
				}
				if c.Name == "workspace" && order[len(order)-1] != "GIT_CONFIG_COUNT" {
					t.Errorf("the user's env must come last (it may replace ours): %v", order)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := buildPod(session(tc.spec), testImages)
			for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
				sc := c.SecurityContext
				if sc == nil || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
					t.Errorf("container %s is not restricted: %+v", c.Name, sc)
				}
				if c.Resources.Limits.Cpu().IsZero() && c.Resources.Limits.Memory().IsZero() {
					t.Errorf("container %s has no limits", c.Name)
				}
			}
			if *pod.Spec.AutomountServiceAccountToken {
				t.Error("service account token mounted")
			}
			tc.check(t, pod)
		})
	}
}
