package agentsession

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// Paths and names inside the workspace pod.
const (
	workspaceDir   = "/workspace"
	agentBinDir    = "/agent/bin"
	sidecarBinary  = agentBinDir + "/executor-sidecar"
	volWorkspace   = "workspace"
	volAgentBin    = "agent-bin"
	volTmp         = "tmp"
	volGitCreds    = "git-credentials"
	gitCredsDir    = "/etc/git-credentials"
	defaultUserID  = 65532
	podNameSuffix  = "-ws"
	pvcNameSuffix  = "-workspace"
	fieldOwnerName = "agent-operator"
)

// Images are the images the operator puts into workspace pods.
type Images struct {
	// Workspace is the default workspace image (spec.workspace.image overrides it).
	Workspace string
	// Executor holds /executor-sidecar and git; it is copied into every pod.
	Executor string
	// PullPolicy of both.
	PullPolicy corev1.PullPolicy
}

// podName is the deterministic name of a session's workspace pod.
func podName(s *agentsv1.AgentSession) string { return s.Name + podNameSuffix }

// pvcName is the name of a PVC the operator creates for spec.workspace.volume.persistentVolumeClaim.size.
func pvcName(s *agentsv1.AgentSession) string { return s.Name + pvcNameSuffix }

// labelManagedBy/managedBy mark every pod the operator creates (workspace and
// warm-pool pods alike); the manager caches only those pods.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "agent-operator"
)

// CacheOptions restrict the manager's pod cache to the operator's own pods
// (a cluster may run many others). Every pod the reconcilers look for must
// carry labelManagedBy, or they will never see it.
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy})},
		// The workspace policies, watched so one deleted or changed is restored.
		&networkingv1.NetworkPolicy{}: {Label: labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy})},
		// Only the sessions' claims, not every Lease of the cluster (node heartbeats).
		&coordinationv1.Lease{}: {Label: labels.SelectorFromSet(labels.Set{claim.LabelClaim: "true"})},
	}}
}

// sessionLabels are set on every object created for s.
func sessionLabels(s *agentsv1.AgentSession) map[string]string {
	return map[string]string{
		agentsv1.LabelSession:         s.Name,
		agentsv1.LabelSessionUID:      string(s.UID),
		labelManagedBy:                managedBy,
		"app.kubernetes.io/component": "workspace",
	}
}

// defaultResources apply when spec.workspace.resources is unset.
func defaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("256Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("2"),
			corev1.ResourceMemory:           resource.MustParse("2Gi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
		},
	}
}

// initResources bound the short-lived init containers. Their requests never exceed those of
// the workspace container: the scheduler reserves for a pod the larger of its init and regular
// containers' requests, so spec.workspace.resources alone decides how much of a node a session
// reserves (otherwise a session asking for 2m CPU would still reserve 50m).
func initResources(workspace corev1.ResourceRequirements) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	for name, q := range r.Requests {
		if w, ok := workspace.Requests[name]; ok && w.Cmp(q) < 0 {
			r.Requests[name] = w.DeepCopy()
		}
	}
	return r
}

// restrictedContext is the container security context of the restricted Pod
// Security Standard.
func restrictedContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](defaultUserID),
		RunAsGroup:               ptr.To[int64](defaultUserID),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// buildPod returns the workspace pod of s (without the ownerReference, which
// the caller sets). It is a pure function of the spec and images.
func buildPod(s *agentsv1.AgentSession, img Images) *corev1.Pod {
	ws := s.Spec.Workspace
	image := ws.Image
	if image == "" {
		image = img.Workspace
	}
	resources := defaultResources()
	if ws.Resources != nil {
		resources = *ws.Resources.DeepCopy()
	}
	mounts := []corev1.VolumeMount{
		{Name: volWorkspace, MountPath: workspaceDir},
		{Name: volAgentBin, MountPath: agentBinDir, ReadOnly: true},
		{Name: volTmp, MountPath: "/tmp"},
	}
	env := append(append([]corev1.EnvVar{{Name: "HOME", Value: workspaceDir}}, gitSafeDirectory()...), ws.Env...)
	initContainers := []corev1.Container{{
		Name:            "install-executor",
		Image:           img.Executor,
		ImagePullPolicy: img.PullPolicy,
		Command:         []string{"/executor-sidecar", "copy-to", agentBinDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: volAgentBin, MountPath: agentBinDir}},
		SecurityContext: restrictedContext(),
		Resources:       initResources(resources),
	}}
	volumes := []corev1.Volume{
		workspaceVolume(s),
		{Name: volAgentBin, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if ws.Git != nil {
		c, v := gitCloneContainer(ws.Git, image, img.PullPolicy, resources)
		initContainers = append(initContainers, c)
		volumes = append(volumes, v...)
	}
	var annotations map[string]string
	if n := s.Status.WorkspaceStartRetries; n > 0 {
		annotations = map[string]string{AnnotationStartAttempt: strconv.Itoa(int(n))}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        podName(s),
			Namespace:   s.Namespace,
			Labels:      sessionLabels(s),
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](10),
			RuntimeClassName:              ws.RuntimeClassName,
			NodeSelector:                  ws.NodeSelector,
			Tolerations:                   ws.Tolerations,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](defaultUserID),
				RunAsGroup:     ptr.To[int64](defaultUserID),
				FSGroup:        ptr.To[int64](defaultUserID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: initContainers,
			Containers: []corev1.Container{{
				Name:            runner.WorkspaceContainer,
				Image:           image,
				ImagePullPolicy: img.PullPolicy,
				Command:         []string{sidecarBinary, "idle"},
				// The change baseline is recorded before the pod is Ready, so
				// not on the path of a session's start (a warm-pool pod's long
				// before its claim); the hook never fails the container.
				Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
					Exec: &corev1.ExecAction{Command: changes.PodStartCommand(sidecarBinary, workspaceDir)},
				}},
				WorkingDir:      workspaceDir,
				Env:             env,
				VolumeMounts:    mounts,
				SecurityContext: restrictedContext(),
				Resources:       resources,
			}},
			Volumes: volumes,
		},
	}
}

func workspaceVolume(s *agentsv1.AgentSession) corev1.Volume {
	v := s.Spec.Workspace.Volume
	if p := v.PersistentVolumeClaim; p != nil {
		claim := p.ClaimName
		if claim == "" {
			claim = pvcName(s)
		}
		return corev1.Volume{Name: volWorkspace, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}}
	}
	ed := &corev1.EmptyDirVolumeSource{}
	if v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
		ed.SizeLimit = ptr.To(v.EmptyDir.SizeLimit.DeepCopy())
	}
	return corev1.Volume{Name: volWorkspace, VolumeSource: corev1.VolumeSource{EmptyDir: ed}}
}

// gitCloneScript clones $GIT_REPOSITORY at $GIT_REF into /workspace. HTTPS
// credentials come from files through a credential helper, so they never
// appear in the command line or the remote URL.
const gitCloneScript = `set -eu
if [ -n "$(ls -A /workspace 2>/dev/null)" ]; then echo "workspace not empty, skipping clone"; exit 0; fi
export GIT_TERMINAL_PROMPT=0
if [ -f ` + gitCredsDir + `/password ]; then
  git config --global credential.helper '!f() { echo username=$(cat ` + gitCredsDir + `/username 2>/dev/null || echo git); echo password=$(cat ` + gitCredsDir + `/password); }; f'
fi
if [ -f ` + gitCredsDir + `/ssh-privatekey ]; then
  kh=` + gitCredsDir + `/known_hosts; opt="-o StrictHostKeyChecking=yes -o UserKnownHostsFile=$kh"
  [ -f "$kh" ] || opt="-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=/tmp/known_hosts"
  export GIT_SSH_COMMAND="ssh -i ` + gitCredsDir + `/ssh-privatekey $opt"
fi
git clone --no-checkout -- "$GIT_REPOSITORY" /workspace
cd /workspace
git checkout ${GIT_REF:+"$GIT_REF"}
`

// gitSafeDirectory is git configuration, in the command scope git trusts
// for it, that lets git work in /workspace: the volume's mount point is
// owned by root and the workspace runs as another user, so git would refuse
// the repository as of "dubious ownership" (the clone, the agent's git
// commands, the change recording). The user's own env entries come after
// these and may replace them.
func gitSafeDirectory() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "GIT_CONFIG_COUNT", Value: "1"},
		{Name: "GIT_CONFIG_KEY_0", Value: "safe.directory"},
		{Name: "GIT_CONFIG_VALUE_0", Value: workspaceDir},
	}
}

// gitCloneContainer clones spec.workspace.git with the workspace image (which
// must provide sh and git); the credentials Secret is mounted into this init
// container only.
func gitCloneContainer(g *agentsv1.GitSource, image string, pull corev1.PullPolicy, workspace corev1.ResourceRequirements) (corev1.Container, []corev1.Volume) {
	c := corev1.Container{
		Name:            "git-clone",
		Image:           image,
		ImagePullPolicy: pull,
		Command:         []string{"/bin/sh", "-c", gitCloneScript},
		// A failed clone's last log lines reach status (initFailure).
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Env: append([]corev1.EnvVar{
			{Name: "GIT_REPOSITORY", Value: g.Repository},
			{Name: "GIT_REF", Value: g.Ref},
			{Name: "HOME", Value: "/tmp"},
		}, gitSafeDirectory()...),
		VolumeMounts: []corev1.VolumeMount{
			{Name: volWorkspace, MountPath: workspaceDir},
			{Name: volTmp, MountPath: "/tmp"},
		},
		SecurityContext: restrictedContext(),
		Resources:       initResources(workspace),
	}
	var vols []corev1.Volume
	if g.CredentialsSecretRef != nil {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volGitCreds, MountPath: gitCredsDir, ReadOnly: true})
		vols = append(vols, corev1.Volume{Name: volGitCreds, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: g.CredentialsSecretRef.Name, DefaultMode: ptr.To[int32](0o400)},
		}})
	}
	return c, vols
}

// buildPVC returns the claim the operator creates when the spec asks for a size.
func buildPVC(s *agentsv1.AgentSession) *corev1.PersistentVolumeClaim {
	p := s.Spec.Workspace.Volume.PersistentVolumeClaim
	if p == nil || p.Size == nil {
		return nil
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: pvcName(s), Namespace: s.Namespace, Labels: sessionLabels(s)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: p.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: p.Size.DeepCopy()}},
		},
	}
}

// podReady reports whether the pod can run tools.
func podReady(pod *corev1.Pod) bool {
	if pod == nil || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podGone reports whether a pod can never run tools again.
func podGone(pod *corev1.Pod) bool {
	return pod != nil && (pod.DeletionTimestamp != nil ||
		pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded)
}

// urlUserinfo matches the user:password@ of a URL in a message.
var urlUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@`)

// initFailure reports the init container of pod that failed, if one did:
// its name, exit code and the end of its log (the kubelet's termination
// message, FallbackToLogsOnError), without any credentials in URLs.
func initFailure(pod *corev1.Pod) (string, bool) {
	if pod == nil {
		return "", false
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		t := cs.State.Terminated
		if t == nil || t.ExitCode == 0 {
			continue
		}
		return withTail(fmt.Sprintf("init container %s exited with code %d", cs.Name, t.ExitCode), t), true
	}
	return "", false
}

// withTail appends to msg the container's termination message (the end of
// its log, or the runtime's error), cut at 1 KiB, credentials in URLs
// masked, control bytes replaced.
func withTail(msg string, t *corev1.ContainerStateTerminated) string {
	if tail := strings.TrimSpace(t.Message); tail != "" {
		msg += ": " + printable(truncate(urlUserinfo.ReplaceAllString(tail, "${1}***@"), 1024))
	}
	return msg
}

// AnnotationStartAttempt is status.workspaceStartRetries as it was when the
// pod was created (absent: 0). A pod the runtime could not start whose
// attempt is below the session's count was counted already, so a manager
// that stops between counting and deleting counts each pod once.
const AnnotationStartAttempt = "agent-operator.dev/start-attempt"

// MaxWorkspaceStartRetries bounds how often a session's pod is replaced
// because the container runtime could not start it.
const MaxWorkspaceStartRetries = 3

// runtimeStartReasons are the reasons a container's terminated state has
// when the container runtime could not start it: containerd's and CRI-O's
// StartError (exit code 128, "failed to create containerd task: ..."), and
// dockershim's ContainerCannotRun. The container never ran: under load the
// runtime's fault, which another pod may not meet (an image whose command
// does not exist shows the same way, and fails after the retries).
var runtimeStartReasons = []string{"StartError", "ContainerCannotRun"}

// runtimeStartFailure reports a container of pod (init or not) that the
// container runtime could not start, and the runtime's message.
func runtimeStartFailure(pod *corev1.Pod) (string, bool) {
	if pod == nil {
		return "", false
	}
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		t := cs.State.Terminated
		if t == nil || !slices.Contains(runtimeStartReasons, t.Reason) {
			continue
		}
		return withTail(fmt.Sprintf("the container runtime could not start container %s (%s)", cs.Name, t.Reason), t), true
	}
	return "", false
}

// startAttempt is the pod's AnnotationStartAttempt, 0 when absent or not a
// number.
func startAttempt(pod *corev1.Pod) int32 {
	n, err := strconv.ParseInt(pod.Annotations[AnnotationStartAttempt], 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// printable replaces the control characters of s other than newline and tab
// (C0, DEL, C1: terminal escape sequences among them) and invalid UTF-8
// with "?": a container's log tail is the workspace image's output, and it
// reaches status, Events and the manager's log.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError:
			return '?'
		}
		return r
	}, s)
}

// oomKilled reports whether the kernel killed the workspace container for
// exceeding its memory limit, and that limit ("unset" without one).
func oomKilled(pod *corev1.Pod) (string, bool) {
	if pod == nil {
		return "", false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != runner.WorkspaceContainer || cs.State.Terminated == nil || cs.State.Terminated.Reason != "OOMKilled" {
			continue
		}
		limit := "unset"
		for _, c := range pod.Spec.Containers {
			if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && c.Name == cs.Name {
				limit = q.String()
			}
		}
		return limit, true
	}
	return "", false
}
