package agentsession

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/k8senv"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// The suite's manager keeps a warm pool of warmPoolSize pods in warmPoolNamespace.
const (
	warmPoolNamespace = "warm-pool"
	warmPoolSize      = 2
)

func TestParseWarmPools(t *testing.T) {
	tests := []struct {
		in      []string
		want    []WarmPool
		wantErr bool
	}{
		{in: nil, want: nil},
		{in: []string{"team-a=3"}, want: []WarmPool{{Namespace: "team-a", Size: 3}}},
		{in: []string{"ci=0", "ml=2:registry.example/ml:v1"}, want: []WarmPool{{Namespace: "ci"}, {Namespace: "ml", Size: 2, Image: "registry.example/ml:v1"}}},
		{in: []string{"team-a"}, wantErr: true},
		{in: []string{"=2"}, wantErr: true},
		{in: []string{"team-a=-1"}, wantErr: true},
		{in: []string{"team-a=two"}, wantErr: true},
		{in: []string{"team-a=2x"}, wantErr: true},
	}
	for _, tc := range tests {
		got, err := ParseWarmPools(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseWarmPools(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ParseWarmPools(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// TestPoolServesOnlySessionsItsPodsFit: a session claims a pooled pod only
// when the pod it would get cold is exactly the pool's.
func TestPoolServesOnlySessionsItsPodsFit(t *testing.T) {
	p, err := newPools([]WarmPool{{Namespace: "ns", Size: 1}, {Namespace: "ns", Size: 1, Image: "custom:1"}}, testImages)
	if err != nil {
		t.Fatal(err)
	}
	parent := &agentsv1.ParentReference{Name: "lead", UID: "u1"}
	tests := []struct {
		name      string
		ns        string
		ws        agentsv1.WorkspaceSpec
		parent    *agentsv1.ParentReference
		wantImage string
		wantPool  bool
	}{
		{name: "defaults", ns: "ns", wantPool: true},
		{name: "pool with its own image", ns: "ns", ws: agentsv1.WorkspaceSpec{Image: "custom:1"}, wantPool: true, wantImage: "custom:1"},
		{name: "other namespace", ns: "other"},
		{name: "other image", ns: "ns", ws: agentsv1.WorkspaceSpec{Image: "other:1"}},
		{name: "env", ns: "ns", ws: agentsv1.WorkspaceSpec{Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
		{name: "git", ns: "ns", ws: agentsv1.WorkspaceSpec{Git: &agentsv1.GitSource{Repository: "https://example.com/r.git"}}},
		{name: "resources", ns: "ns", ws: agentsv1.WorkspaceSpec{Resources: &corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}}}},
		{name: "pvc", ns: "ns", ws: agentsv1.WorkspaceSpec{Volume: agentsv1.WorkspaceVolume{
			PersistentVolumeClaim: &agentsv1.PVCVolume{Size: ptrQuantity("1Gi")}}}},
		{name: "child in the parent's workspace", ns: "ns", parent: parent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &agentsv1.AgentSession{
				ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: tc.ns},
				Spec:       agentsv1.AgentSessionSpec{Workspace: tc.ws, ParentRef: tc.parent},
			}
			if tc.parent != nil {
				s.Annotations = map[string]string{agentsv1.AnnotationSharedWorkspace: tc.parent.Name}
				s.OwnerReferences = []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "AgentSession",
					Name: tc.parent.Name, UID: types.UID(tc.parent.UID), Controller: ptr.To(true)}}
			}
			got := p.forSession(s, testImages)
			if (got != nil) != tc.wantPool {
				t.Fatalf("pool %v, want one: %v", got, tc.wantPool)
			}
			if got != nil && got.Image != tc.wantImage {
				t.Fatalf("pool of image %q, want %q", got.Image, tc.wantImage)
			}
		})
	}
}

// poolPods lists the unclaimed pods of the suite's pool and marks them ready,
// as the kubelet would, once they exist.
func readyPoolPods(t *testing.T, want int) []string {
	t.Helper()
	var names []string
	eventually(t, fmt.Sprintf("%d warm pool pods", want), func() error {
		var list corev1.PodList
		if err := testClient.List(t.Context(), &list, client.InNamespace(warmPoolNamespace), client.HasLabels{LabelWarmPool}); err != nil {
			return err
		}
		names = names[:0]
		for i := range list.Items {
			pod := &list.Items[i]
			if pod.DeletionTimestamp != nil {
				continue
			}
			if !podReady(pod) {
				// The pool controller may delete a pod between the list
				// and this update (it trims or replaces pods): look again.
				if err := setPodReady(t, pod); err != nil {
					return fmt.Errorf("mark pod %s ready: %w", pod.Name, err)
				}
			}
			names = append(names, pod.Name)
		}
		if len(names) != want {
			return fmt.Errorf("pool pods %v", names)
		}
		return nil
	})
	return names
}

// TestWarmPoolPodsAreClaimedAtomicallyAndReplaced: two sessions created at
// once in the pool's namespace each claim a different pre-started pod (now
// owned by and labelled for its session), the pool refills to its size, and
// a session whose pod would differ from the pool's starts cold.
func TestWarmPoolPodsAreClaimedAtomicallyAndReplaced(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: warmPoolNamespace}}
	if err := testClient.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace: %v", err)
	}
	pooled := readyPoolPods(t, warmPoolSize)
	for _, name := range pooled {
		pod := &corev1.Pod{}
		if err := testClient.Get(t.Context(), client.ObjectKey{Namespace: warmPoolNamespace, Name: name}, pod); err != nil {
			t.Fatal(err)
		}
		want := buildPod(&agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: warmPoolNamespace}}, suiteImages).Spec
		if pod.Spec.Containers[0].Image != want.Containers[0].Image || !ptrFalse(pod.Spec.AutomountServiceAccountToken) ||
			metav1.GetControllerOf(pod) != nil {
			t.Fatalf("pool pod %s is not an unowned, locked-down default workspace pod: %+v", name, pod.Spec)
		}
	}

	var wg sync.WaitGroup
	sessions := make([]*agentsv1.AgentSession, 2)
	for i := range sessions {
		wg.Go(func() { sessions[i] = scriptedSession(t, warmPoolNamespace) })
	}
	wg.Wait()
	claimed := map[string]bool{}
	for _, s := range sessions {
		got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
		if !slices.Contains(pooled, got.Status.PodName) {
			t.Fatalf("session %s ran in pod %q, want one of the warm pods %v", s.Name, got.Status.PodName, pooled)
		}
		if claimed[got.Status.PodName] {
			t.Fatalf("pod %s was claimed twice", got.Status.PodName)
		}
		claimed[got.Status.PodName] = true
		pod := &corev1.Pod{}
		if err := testClient.Get(t.Context(), client.ObjectKey{Namespace: warmPoolNamespace, Name: got.Status.PodName}, pod); err != nil {
			t.Fatal(err)
		}
		if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != got.UID {
			t.Fatalf("claimed pod %s controller %+v, want session %s", pod.Name, ref, got.UID)
		}
		if pod.Labels[agentsv1.LabelSessionUID] != string(got.UID) || pod.Labels[LabelWarmPool] != "" {
			t.Fatalf("claimed pod %s labels %v", pod.Name, pod.Labels)
		}
	}

	// Both claims are counted, and the pool's size is reported.
	if n := metricSum(t, "agent_operator_warm_pool_claims_total", map[string]string{"namespace": warmPoolNamespace, "result": "claimed"}); n < 2 {
		t.Errorf("warm_pool_claims_total{result=claimed} = %v, want at least 2", n)
	}
	refilled := readyPoolPods(t, warmPoolSize)
	eventually(t, "warm_pool_pods reports the refilled pool", func() error {
		if n := metricSum(t, "agent_operator_warm_pool_pods", map[string]string{"namespace": warmPoolNamespace}); n != warmPoolSize {
			return fmt.Errorf("warm_pool_pods = %v, want %d", n, warmPoolSize)
		}
		return nil
	})
	for _, name := range refilled {
		if claimed[name] {
			t.Fatalf("claimed pod %s is still in the pool", name)
		}
	}

	custom := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("custom"), Namespace: warmPoolNamespace},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Write hello.py",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "script"}},
			Workspace: agentsv1.WorkspaceSpec{Env: []corev1.EnvVar{{Name: "TEAM", Value: "a"}}},
		},
	}
	if err := testClient.Create(t.Context(), custom); err != nil {
		t.Fatalf("create session: %v", err)
	}
	markPodReady(t, getPod(t, custom)) // a cold pod of its own, by the deterministic name
	waitPhase(t, custom, agentsv1.PhaseSucceeded, nil)
	if n := len(readyPoolPods(t, warmPoolSize)); n != warmPoolSize {
		t.Fatalf("pool has %d pods after a cold start, want %d", n, warmPoolSize)
	}
}

// readyPool is a warm pool of size ready pods in ns, kept by no
// controller: the pods are created and marked ready here.
func readyPool(t *testing.T, ns string, size int) (*pools, []*corev1.Pod) {
	t.Helper()
	p, err := newPools([]WarmPool{{Namespace: ns, Size: size}}, suiteImages)
	if err != nil {
		t.Fatal(err)
	}
	var pl *pool
	for _, v := range p.byKey {
		pl = v
	}
	var out []*corev1.Pod
	for range size {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "warm-", Namespace: ns, Labels: map[string]string{LabelWarmPool: pl.key}},
			Spec:       *pl.spec.DeepCopy(),
		}
		if err := testClient.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		markPodReady(t, pod)
		out = append(out, pod)
	}
	return p, out
}

func ptrFalse(b *bool) bool { return b != nil && !*b }

// suiteRecorder is the suite manager's event recorder.
var suiteRecorder events.EventRecorder

// suiteImages are the images of the suite's manager.
var suiteImages = Images{Workspace: "agent-operator/workspace:dev", Executor: "agent-operator/executor:dev", PullPolicy: "IfNotPresent"}

// TestConcurrentClaimsTakeEachPodOnce: four sessions claim from a pool of
// two ready pods at the same time, straight against the API server: exactly
// two claims succeed, on different pods, and the others start cold (nil).
func TestConcurrentClaimsTakeEachPodOnce(t *testing.T) {
	ns := newNamespace(t)
	p, _ := readyPool(t, ns, 2)
	r := &Reconciler{Client: testClient, Scheme: scheme.Scheme, Recorder: suiteRecorder, Images: suiteImages, pools: p}
	sessions := make([]*agentsv1.AgentSession, 4)
	for i := range sessions {
		sessions[i] = &agentsv1.AgentSession{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("racer-%d", i), Namespace: ns},
			Spec: agentsv1.AgentSessionSpec{Prompt: "p", Suspend: true,
				Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
					ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "none"}}},
		}
		if err := testClient.Create(t.Context(), sessions[i]); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]*corev1.Pod, len(sessions))
	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Go(func() { got[i], errs[i] = r.claimPod(t.Context(), s) })
	}
	wg.Wait()
	owners := map[string]string{}
	for i, pod := range got {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		if pod == nil {
			continue
		}
		if prev, dup := owners[pod.Name]; dup {
			t.Fatalf("pod %s claimed by %s and %s", pod.Name, prev, sessions[i].Name)
		}
		owners[pod.Name] = sessions[i].Name
		live := &corev1.Pod{}
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(pod), live); err != nil {
			t.Fatal(err)
		}
		if ref := metav1.GetControllerOf(live); ref == nil || ref.UID != sessions[i].UID {
			t.Fatalf("pod %s is controlled by %+v, want %s", live.Name, ref, sessions[i].Name)
		}
	}
	if len(owners) != 2 {
		t.Fatalf("%d pods claimed (%v), want 2", len(owners), owners)
	}
}

// TestPoolWithSparesIsLookedAtAgain: a pool that keeps spare executor
// streams asks to be reconciled again after spareRecheck even when none of
// its pods changes, so a spare the kubelet closed (idle for its
// streamingConnectionIdleTimeout) is opened again; without spares the pool
// waits for its pods to change, as before. On the old code a lost spare
// stayed lost until a pool pod changed.
func TestPoolWithSparesIsLookedAtAgain(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: warmPoolNamespace}}
	if err := testClient.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace: %v", err)
	}
	readyPoolPods(t, warmPoolSize)
	pl, err := newPools([]WarmPool{{Namespace: warmPoolNamespace, Size: warmPoolSize}}, suiteImages)
	if err != nil {
		t.Fatal(err)
	}
	var req ctrl.Request
	for key := range pl.byKey {
		req.NamespacedName = key
	}
	streams, err := k8senv.NewPool(k8senv.Config{REST: testCfg, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = streams.Close() })
	for _, tc := range []struct {
		name    string
		streams streamPreopener
		want    time.Duration
	}{
		{"spares", streams, spareRecheck},
		{"no spares", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &PoolReconciler{Client: testClient, pools: pl, Streams: tc.streams}
			res, err := p.Reconcile(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.want {
				t.Fatalf("RequeueAfter = %s, want %s", res.RequeueAfter, tc.want)
			}
		})
	}
}

// TestClaimedReadyPodStartsTheRunnerAtOnce: the reconcile that claims a
// ready warm-pool pod starts the session's runner too, instead of leaving it
// to the reconcile the claim's status write and pod update cause (a warm
// start waited for that write and a watch delivery). A cold pod, not ready
// yet, still waits for the pod watch.
func TestClaimedReadyPodStartsTheRunnerAtOnce(t *testing.T) {
	ns := newNamespace(t)
	p, pods := readyPool(t, ns, 1)
	run := claimTestRunner(t)
	rec := claimTestReconciler(run, p)
	warm := claimTestSession(t, ns)
	if name, started := reconcileUntilPod(t, rec, run, warm); name != pods[0].Name || !started {
		t.Fatalf("the reconcile that claimed pod %q (want %s) started the runner: %v, want true", name, pods[0].Name, started)
	}
	cold := claimTestSession(t, ns) // the pool is empty now
	if name, started := reconcileUntilPod(t, rec, run, cold); name == "" || started {
		t.Fatalf("the reconcile that created cold pod %q started the runner before the pod was ready", name)
	}
}

// A manager that dies between a pool pod's claim and the status write that
// records it: the restarted one (a new reconciler and runner, nothing in
// memory) finds the pod the session claimed by its labels and runs the
// session there, instead of claiming a second pool pod or starting cold.
func TestRestartAfterAClaimFindsTheClaimedPod(t *testing.T) {
	ns := newNamespace(t)
	p, pods := readyPool(t, ns, 2)
	before := claimTestReconciler(claimTestRunner(t), p)
	s := claimTestSession(t, ns)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)}
	if _, err := before.Reconcile(t.Context(), req); err != nil { // the first status
		t.Fatal(err)
	}
	if err := testClient.Get(t.Context(), req.NamespacedName, s); err != nil {
		t.Fatal(err)
	}
	claimed, err := before.claimPod(t.Context(), s) // the claim's write, then the crash
	if err != nil || claimed == nil {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	fresh, err := newPools([]WarmPool{{Namespace: ns, Size: 2}}, suiteImages)
	if err != nil {
		t.Fatal(err)
	}
	run := claimTestRunner(t)
	if name, started := reconcileUntilPod(t, claimTestReconciler(run, fresh), run, s); name != claimed.Name || !started {
		t.Fatalf("after the restart the session runs in pod %q (started %v), want the claimed %s", name, started, claimed.Name)
	}
	for _, pod := range pods {
		live := &corev1.Pod{}
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(pod), live); err != nil {
			t.Fatal(err)
		}
		if owned := metav1.GetControllerOf(live) != nil; owned != (pod.Name == claimed.Name) {
			t.Errorf("pool pod %s owned: %v; only the claimed %s may be", pod.Name, owned, claimed.Name)
		}
	}
}

// The class of the claim tests' sessions: the suite's manager leaves them
// alone, so only the test's reconciler acts on them.
const claimTestClass = "claim-starts-runner"

func claimTestSession(t *testing.T, ns string) *agentsv1.AgentSession {
	return scriptedSession(t, ns, func(s *agentsv1.AgentSession) { s.Labels = map[string]string{agentsv1.LabelClass: claimTestClass} })
}

func claimTestRunner(t *testing.T) *runner.Runner {
	t.Helper()
	run, err := runner.New(runner.Options{
		Reader: testClient, Journals: testJS, Clients: runner.ProviderClients, Envs: workspaces.envFactory,
		Log: logr.Discard(), Prices: suitePrices,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Shutdown(context.Background()) })
	return run
}

func claimTestReconciler(run *runner.Runner, p *pools) *Reconciler {
	return &Reconciler{Client: testClient, Scheme: scheme.Scheme, Recorder: suiteRecorder, Runner: run,
		Images: suiteImages, EventsPrefix: "agents", Class: claimTestClass, Now: time.Now, pools: p}
}

// reconcileUntilPod reconciles s with rec until it has a workspace pod and
// reports whether run was driving it by then.
func reconcileUntilPod(t *testing.T, rec *Reconciler, run *runner.Runner, s *agentsv1.AgentSession) (string, bool) {
	t.Helper()
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)}
	for range 5 {
		if _, err := rec.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		got := &agentsv1.AgentSession{}
		if err := testClient.Get(t.Context(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		if got.Status.PodName != "" {
			_, started := run.Progress(got.UID)
			return got.Status.PodName, started
		}
	}
	t.Fatalf("session %s has no pod after 5 reconciles", s.Name)
	return "", false
}

// TestRefillWait: a short pool waits RefillDelay from when it was first
// seen short, and a new shortage after it was full waits again.
func TestRefillWait(t *testing.T) {
	key := types.NamespacedName{Namespace: "a", Name: "pool"}
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	p := &PoolReconciler{RefillDelay: 10 * time.Second}
	steps := []struct {
		name string
		at   time.Duration
		full bool
		want time.Duration
	}{
		{"first seen short", 0, false, 10 * time.Second},
		{"still short", 4 * time.Second, false, 6 * time.Second},
		{"the delay passed", 10 * time.Second, false, 0},
		{"later still", 30 * time.Second, false, 0},
		{"short again after it was full", 40 * time.Second, true, 10 * time.Second},
	}
	for _, st := range steps {
		if st.full {
			p.full(key)
		}
		if got := p.refillWait(key, t0.Add(st.at)); got != st.want {
			t.Errorf("%s: wait %s, want %s", st.name, got, st.want)
		}
	}
	if got := (&PoolReconciler{RefillDelay: -1}).refillWait(key, t0); got != 0 {
		t.Errorf("negative RefillDelay: wait %s, want none", got)
	}
	if got := (&PoolReconciler{}).refillWait(key, t0); got != DefaultRefillDelay {
		t.Errorf("zero RefillDelay: wait %s, want the default %s", got, DefaultRefillDelay)
	}
}

// TestShortPoolRefillsAfterItsDelay: on a real API server, a pool found short
// of pods (a claim took one, or it is new) creates none until its refill
// delay has passed, so the start of a claimed pod's session does not share
// the cluster with the start of its replacement; then it creates them all.
// On the old code the first reconcile created them at once.
func TestShortPoolRefillsAfterItsDelay(t *testing.T) {
	ns := newNamespace(t)
	pl, err := newPools([]WarmPool{{Namespace: ns, Size: 2}}, suiteImages)
	if err != nil {
		t.Fatal(err)
	}
	var req ctrl.Request
	for key := range pl.byKey {
		req.NamespacedName = key
	}
	pods := func() int {
		var list corev1.PodList
		if err := testClient.List(t.Context(), &list, client.InNamespace(ns), client.HasLabels{LabelWarmPool}); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	waiting := &PoolReconciler{Client: testClient, pools: pl, RefillDelay: time.Hour}
	for i := range 2 {
		res, err := waiting.Reconcile(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter <= 59*time.Minute || res.RequeueAfter > time.Hour {
			t.Errorf("reconcile %d of a short pool: RequeueAfter %s, want the rest of its hour", i, res.RequeueAfter)
		}
		if n := pods(); n != 0 {
			t.Fatalf("reconcile %d of a short pool inside its delay created %d pods, want none yet", i, n)
		}
	}
	now := &PoolReconciler{Client: testClient, pools: pl, RefillDelay: -1}
	if _, err := now.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if n := pods(); n != 2 {
		t.Errorf("a short pool without a delay has %d pods, want 2", n)
	}
}
