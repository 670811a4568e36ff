//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// natsRelease is the Helm release of the external-NATS specs (see resumeRelease for why each
// container has its own release name).
const natsRelease = "ao-nats"

// The NATS server of the external-NATS specs: one pod, its JetStream store on a PVC of the
// default StorageClass, reached by the manager through a ClusterIP Service (the local cluster
// has no DNS).
const (
	natsName       = "nats"
	natsClaim      = "nats-data"
	natsClientPort = 4222
	natsHTTPPort   = 8222
)

// natsRestartSteps is the number of shell steps of natsRestartScript; natsKilledStep is the
// step during which the NATS server is restarted.
const (
	natsRestartSteps = 4
	natsKilledStep   = 2
)

// natsRestartScript runs natsRestartSteps steps of 3 s each (stepsScript).
func natsRestartScript() string { return stepsScript(natsRestartSteps, 3) }

// natsServerPod is the NATS server: JetStream with its store on the natsClaim PVC, so the
// streams survive the pod, and ready once /healthz says JetStream is up.
func natsServerPod(ns string) *corev1.Pod {
	return natsPod(ns, natsName, map[string]string{"app": natsName}, corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: natsClaim},
	})
}

// natsPod is a NATS server named name (pod and server name) with JetStream, its store in the
// volume store, the extra flags args, and ready once /healthz says JetStream is up (with a
// cluster: a meta leader is known and this server's streams are current).
func natsPod(ns, name string, labels map[string]string, store corev1.VolumeSource, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(5)),
			AutomountServiceAccountToken:  new(bool),
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: new(true)},
			Containers: []corev1.Container{{
				Name:            natsName,
				Image:           framework.NATSImage,
				ImagePullPolicy: framework.ImagePullPolicy,
				Args: append([]string{"--jetstream", "--store_dir=/data", "--server_name=" + name,
					fmt.Sprintf("--port=%d", natsClientPort), fmt.Sprintf("--http_port=%d", natsHTTPPort)}, args...),
				Ports: []corev1.ContainerPort{
					{Name: "client", ContainerPort: natsClientPort},
					{Name: "monitor", ContainerPort: natsHTTPPort},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("monitor")}},
					PeriodSeconds: 1,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: store}},
		},
	}
}

// startNATS creates in ns the store's PVC, the Service and the server pod, waits until the pod
// is ready and returns the client URL (the Service's ClusterIP).
func startNATS(ctx context.Context, ns string) string {
	GinkgoHelper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: natsClaim},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	Expect(f.Client.Create(ctx, pvc)).To(Succeed())
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: natsName},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": natsName},
			Ports:    []corev1.ServicePort{{Name: "client", Port: natsClientPort, TargetPort: intstr.FromString("client")}},
		},
	}
	Expect(f.Client.Create(ctx, svc)).To(Succeed())
	Expect(f.Client.Create(ctx, natsServerPod(ns))).To(Succeed())
	_, err := f.WaitForPodRunning(ctx, ns, natsName, 3*time.Minute)
	Expect(err).NotTo(HaveOccurred(), "the NATS server becomes ready")
	Expect(svc.Spec.ClusterIP).NotTo(BeEmpty())
	return fmt.Sprintf("nats://%s:%d", svc.Spec.ClusterIP, natsClientPort)
}

// forwardToPod forwards a free local port on 127.0.0.1 to port of a pod through the API
// server, like `kubectl port-forward`, until the spec ends; it returns the local port.
func forwardToPod(ctx context.Context, ns, pod string, port int) uint16 {
	GinkgoHelper()
	u := f.Clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(f.Config)
	Expect(err).NotTo(HaveOccurred())
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	tunnel, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, f.Config)
	Expect(err).NotTo(HaveOccurred())
	dialer = portforward.NewFallbackDialerForStreaming(tunnel, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	DeferCleanup(func() { close(stop) })
	select {
	case <-ready:
	case err := <-done:
		Fail(fmt.Sprintf("port-forward to %s/%s: %v", ns, pod, errors.Join(errors.New("forwarding ended"), err)))
	case <-ctx.Done():
		Fail(fmt.Sprintf("port-forward to %s/%s: %v", ns, pod, ctx.Err()))
	}
	ports, err := fw.GetPorts()
	Expect(err).NotTo(HaveOccurred())
	Expect(ports).To(HaveLen(1))
	return ports[0].Local
}

// stopNATS deletes the NATS server pod (SIGTERM, the usual way a NATS pod goes) and waits
// until it is gone, so the next server never shares the store with this one.
func stopNATS(ctx context.Context, ns string) {
	GinkgoHelper()
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: natsName}}
	Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(old), old)).To(Succeed())
	Expect(f.Client.Delete(ctx, old)).To(Succeed())
	Expect(f.WaitForGone(ctx, old, 2*time.Minute)).To(Succeed(), "the NATS server stops")
}

// restartNATS starts the NATS server again on the same store, waits until it is ready and
// returns the time just before it was created: no event can be acknowledged before then.
func restartNATS(ctx context.Context, ns string) time.Time {
	GinkgoHelper()
	at := time.Now()
	Expect(f.Client.Create(ctx, natsServerPod(ns))).To(Succeed())
	_, err := f.WaitForPodRunning(ctx, ns, natsName, 3*time.Minute)
	Expect(err).NotTo(HaveOccurred(), "the NATS server is ready again")
	return at
}

// natsRestartRun is one session whose NATS server is restarted while it runs.
type natsRestartRun struct {
	op     *operator
	natsNS string
	s      *agentsv1.AgentSession
	// manager is the manager pod when the session started.
	manager corev1.Pod
	// restartedAt is when the new NATS server was created.
	restartedAt time.Time
}

// startNATSRestartRun starts a session replaying natsRestartScript and waits until the
// command of natsKilledStep runs.
func startNATSRestartRun(ctx context.Context, op *operator, natsNS, name string) *natsRestartRun {
	GinkgoHelper()
	ns := f.SpecNamespace(ctx, "ao-nats-session")
	r := &natsRestartRun{op: op, natsNS: natsNS, s: scriptedSession(ctx, ns, name, natsRestartScript())}
	managers, err := managerPods(ctx, op.ns, natsRelease)
	Expect(err).NotTo(HaveOccurred())
	Expect(managers).To(HaveLen(1), "one manager pod")
	r.manager = managers[0]
	waitForWorkspaceFile(ctx, r.s, fmt.Sprintf("started%d", natsKilledStep))
	Expect(r.s.Status.Phase).To(Equal(agentsv1.PhaseRunning))
	GinkgoWriter.Printf("step %d runs; stopping NATS at lastEventSequence=%d\n", natsKilledStep, r.s.Status.LastEventSequence)
	return r
}

// expectFinishedCleanly checks what the session must look like after the restart: Succeeded
// with the right result in the same manager pod; a gap-free journal on the restarted server
// with every event stored exactly once; each step run exactly once; no model call while NATS
// was down.
func (r *natsRestartRun) expectFinishedCleanly(ctx context.Context) {
	GinkgoHelper()
	s := r.s
	final := waitForOutcome(ctx, s, 4*time.Minute)
	Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
	Expect(final.Status.Result).To(Equal("All steps done."))
	Expect(final.Status.ToolCalls).To(BeEquivalentTo(natsRestartSteps))
	journal := meta.FindStatusCondition(final.Status.Conditions, agentsv1.ConditionJournalAvailable)
	Expect(journal).NotTo(BeNil())
	Expect(journal.Status).To(Equal(metav1.ConditionTrue), "condition %s: %s", journal.Reason, journal.Message)

	// The manager rode out the outage itself: same pod, no container restart, so no
	// resume from the journal was involved.
	managers, err := managerPods(ctx, r.op.ns, natsRelease)
	Expect(err).NotTo(HaveOccurred())
	Expect(managers).To(HaveLen(1))
	Expect(managers[0].UID).To(Equal(r.manager.UID), "the same manager pod")
	for i, cs := range managers[0].Status.ContainerStatuses {
		Expect(cs.RestartCount).To(Equal(r.manager.Status.ContainerStatuses[i].RestartCount), "restarts of container %s", cs.Name)
	}

	// The journal, read with the plugin from the restarted server: seq 1, 2, 3, ...
	// without a gap, ending with the session's end.
	port := forwardToPod(ctx, r.natsNS, natsName, natsClientPort)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", port)
	evs := completeJournal(ctx, r.op.plugin, final, "--nats-url", natsURL)

	// Every event was stored exactly once: the publishes retried across the restart were
	// recognised as duplicates by the restarted server.
	nc, err := events.Connect(ctx, natsURL, events.ConnectOptions{Name: "e2e"})
	Expect(err).NotTo(HaveOccurred())
	defer nc.Close()
	js, err := jetstream.New(nc)
	Expect(err).NotTo(HaveOccurred())
	stream, err := js.Stream(ctx, events.DefaultStreamName)
	Expect(err).NotTo(HaveOccurred())
	filter := events.SessionFilter(events.DefaultPrefix, events.SessionRef{Namespace: s.Namespace, Name: s.Name, UID: string(final.UID)})
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	Expect(err).NotTo(HaveOccurred())
	var stored uint64
	for _, n := range info.State.Subjects {
		stored += n
	}
	Expect(stored).To(BeEquivalentTo(len(evs)), "messages stored for the session (subjects %v)", info.State.Subjects)

	// Each step ran exactly once, with one TOOL_CALL_START and one TOOL_CALL_END; the
	// model was not called while NATS was down: every model response after the command of
	// natsKilledStep began after the new server was created.
	ran := stepsRun(ctx, s.Namespace, final.Status.PodName)
	stepOf := map[string]int{}
	ends := map[string][]loop.Event{}
	var killedEnd uint64
	var later int
	for _, ev := range evs {
		switch ev.Kind {
		case loop.EventToolCallStart:
			Expect(stepOf).NotTo(HaveKey(ev.Data.CallID), "call %s started twice", ev.Data.CallID)
			if i := stepOfCall(ev, natsRestartSteps); i > 0 {
				stepOf[ev.Data.CallID] = i
			}
		case loop.EventToolCallEnd:
			ends[ev.Data.CallID] = append(ends[ev.Data.CallID], ev)
			if stepOf[ev.Data.CallID] == natsKilledStep {
				killedEnd = ev.Seq
			}
		case loop.EventAssistantTextStart, loop.EventAssistantTextEnd:
			if killedEnd != 0 {
				later++
				Expect(ev.Time).To(BeTemporally(">=", r.restartedAt), "event %d (%s) was emitted while NATS was down", ev.Seq, ev.Kind)
			}
		}
	}
	Expect(stepOf).To(HaveLen(natsRestartSteps), "one tool call per step")
	Expect(killedEnd).NotTo(BeZero(), "the journal holds the TOOL_CALL_END of step %d", natsKilledStep)
	Expect(later).To(BeNumerically(">", 0), "model responses after step %d", natsKilledStep)
	for callID, step := range stepOf {
		name := fmt.Sprintf("step%d", step)
		Expect(ends[callID]).To(HaveLen(1), "TOOL_CALL_END events of %s (%s)", callID, name)
		Expect(ends[callID][0].Data.IsError).To(BeFalse(), "%s: %s", name, ends[callID][0].Data.Error)
		Expect(ends[callID][0].Data.Output).To(ContainSubstring("finished "+name), "result of %s", name)
		Expect(ran[name]).To(Equal(1), "%s ran %d times", name, ran[name])
	}
	Expect(ran).To(HaveLen(natsRestartSteps), "steps.log holds only the steps: %v", ran)
}

// The journal lives on an external NATS JetStream in the cluster. When that server restarts,
// a running session must wait for it at the next boundary and then carry on in the same
// manager: nothing lost, nothing stored twice, nothing run twice.
var _ = Describe("external NATS restarted mid-session", Ordered, ContinueOnFailure, Label("chaos"), func() {
	op := &operator{}
	var natsNS string
	BeforeAll(func(ctx SpecContext) {
		natsNS = f.SpecNamespace(ctx, "ao-nats-server")
		url := startNATS(ctx, natsNS)
		GinkgoWriter.Printf("NATS server in %s at %s\n", natsNS, url)
		// Registered after the NATS namespace's cleanup, so uninstalled before NATS goes away.
		op.ns = installOperator(ctx, natsRelease, "ao-nats", "nats.mode=external", "nats.external.url="+url)
		bin, err := framework.BuildPlugin(ctx, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		op.plugin = bin
	}, NodeTimeout(10*time.Minute))
	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			for _, ns := range []string{op.ns, natsNS} {
				if ns != "" {
					f.DumpNamespace(ctx, ns, GinkgoWriter)
				}
			}
		}
	})

	It("pauses a running session with JournalAvailable False while NATS is down and finishes it after the restart: a gap-free journal, no event stored twice, no tool call run twice", func(ctx SpecContext) {
		r := startNATSRestartRun(ctx, op, natsNS, "nats-down")
		stopNATS(ctx, natsNS)

		// The command ends, its TOOL_CALL_END cannot be stored: the session waits, still
		// Running, and its JournalAvailable condition says why. NATS stays away until then.
		down := &agentsv1.AgentSession{}
		Eventually(func(g Gomega, ctx context.Context) {
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(r.s), down)).To(Succeed())
			c := meta.FindStatusCondition(down.Status.Conditions, agentsv1.ConditionJournalAvailable)
			g.Expect(c).NotTo(BeNil(), "condition %s", agentsv1.ConditionJournalAvailable)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(agentsv1.ReasonJournalUnavailable))
			g.Expect(c.Message).NotTo(BeEmpty(), "the condition says why")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
		Expect(down.Status.Phase).To(Equal(agentsv1.PhaseRunning), "a session waits for its journal, it does not fail")
		GinkgoWriter.Printf("journal unavailable: %s\n", meta.FindStatusCondition(down.Status.Conditions, agentsv1.ConditionJournalAvailable).Message)

		r.restartedAt = restartNATS(ctx, natsNS)
		r.expectFinishedCleanly(ctx)
	}, SpecTimeout(10*time.Minute))

	It("finishes a session whose NATS server restarts at once, mid-command: a gap-free journal, no event stored twice, no tool call run twice", func(ctx SpecContext) {
		// Back before the publishes of the outage time out: they wait in the client's
		// reconnect buffer and may be retried as well; the server must drop the duplicates.
		r := startNATSRestartRun(ctx, op, natsNS, "nats-blip")
		stopNATS(ctx, natsNS)
		r.restartedAt = restartNATS(ctx, natsNS)
		r.expectFinishedCleanly(ctx)
	}, SpecTimeout(10*time.Minute))
})
