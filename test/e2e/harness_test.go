//go:build e2e

package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// These specs prove the harness itself: the cluster runs pods from our images, exec works
// over both stream protocols, the controller-manager garbage-collects and deletes
// namespaces, claims get volumes, and kube-proxy routes ClusterIP Services from inside pods.
var _ = Describe("cluster harness", func() {
	It("runs a pod from the workspace image", func(ctx SpecContext) {
		pod := framework.WorkspacePod(suiteNamespace, "workspace-running")
		Expect(f.Client.Create(ctx, pod)).To(Succeed())
		DeferCleanup(f.Client.Delete, pod)
		running, err := f.WaitForPodRunning(ctx, pod.Namespace, pod.Name, framework.DefaultTimeout)
		Expect(err).NotTo(HaveOccurred())
		Expect(running.Status.PodIP).NotTo(BeEmpty(), "the pod got an address from the CNI bridge")
	}, SpecTimeout(3*time.Minute))

	Describe("exec", Ordered, func() {
		var ns string
		const pod = "exec-target"

		BeforeAll(func(ctx SpecContext) {
			ns = f.SpecNamespace(ctx, "exec")
			Expect(f.Client.Create(ctx, framework.WorkspacePod(ns, pod))).To(Succeed())
			_, err := f.WaitForPodRunning(ctx, ns, pod, framework.DefaultTimeout)
			Expect(err).NotTo(HaveOccurred())
		}, NodeTimeout(3*time.Minute))

		DescribeTable("returns stdout, stderr and the exit code",
			func(ctx SpecContext, transport framework.Transport) {
				res, err := f.Exec(ctx, framework.ExecOptions{
					Namespace: ns, Pod: pod, Transport: transport,
					Command: []string{"sh", "-c", "echo hi; echo oops >&2; exit 3"},
				})
				Expect(err).NotTo(HaveOccurred())
				Expect(res.Stdout).To(Equal("hi\n"))
				Expect(res.Stderr).To(Equal("oops\n"))
				Expect(res.ExitCode).To(Equal(3))

				res, err = f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: pod, Transport: transport, Command: []string{"true"}})
				Expect(err).NotTo(HaveOccurred())
				Expect(res.ExitCode).To(Equal(0))
			},
			Entry("over WebSocket", framework.TransportWebSocket, SpecTimeout(time.Minute)),
			Entry("over SPDY", framework.TransportSPDY, SpecTimeout(time.Minute)),
			Entry("with kubectl's WebSocket-then-SPDY fallback", framework.TransportDefault, SpecTimeout(time.Minute)),
		)

		DescribeTable("pipes stdin to the command until EOF",
			func(ctx SpecContext, transport framework.Transport) {
				data := make([]byte, 1<<20)
				_, _ = rand.Read(data)
				sum := sha256.Sum256(data)
				res, err := f.Exec(ctx, framework.ExecOptions{
					Namespace: ns, Pod: pod, Transport: transport,
					Command: []string{"sh", "-c", "sha256sum | cut -d' ' -f1"},
					Stdin:   bytes.NewReader(data),
				})
				Expect(err).NotTo(HaveOccurred())
				Expect(res.ExitCode).To(Equal(0), "stderr: %s", res.Stderr)
				Expect(strings.TrimSpace(res.Stdout)).To(Equal(hex.EncodeToString(sum[:])))
			},
			Entry("over WebSocket", framework.TransportWebSocket, SpecTimeout(time.Minute)),
			Entry("over SPDY", framework.TransportSPDY, SpecTimeout(time.Minute)),
			Entry("with kubectl's WebSocket-then-SPDY fallback", framework.TransportDefault, SpecTimeout(time.Minute)),
		)
	})

	It("garbage-collects dependents when their owner is deleted", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "gc")
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: ns}}
		Expect(f.Client.Create(ctx, owner)).To(Succeed())
		ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}

		depCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", Namespace: ns, OwnerReferences: []metav1.OwnerReference{ref}}}
		Expect(f.Client.Create(ctx, depCM)).To(Succeed())
		depPod := framework.WorkspacePod(ns, "dependent")
		depPod.OwnerReferences = []metav1.OwnerReference{ref}
		Expect(f.Client.Create(ctx, depPod)).To(Succeed())
		_, err := f.WaitForPodRunning(ctx, ns, depPod.Name, framework.DefaultTimeout)
		Expect(err).NotTo(HaveOccurred())

		Expect(f.Client.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		Expect(f.WaitForGone(ctx, depCM, time.Minute)).To(Succeed())
		Expect(f.WaitForGone(ctx, depPod, time.Minute)).To(Succeed())
	}, SpecTimeout(3*time.Minute))

	It("provisions PersistentVolumeClaims of the default StorageClass for non-root pods", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "pvc")
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: resource.MustParse("1Gi"),
				}},
			},
		}
		Expect(f.Client.Create(ctx, pvc)).To(Succeed())

		pod := framework.WorkspacePod(ns, "writer")
		uid := int64(65532)
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: new(true)}
		pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name},
		}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		Expect(f.Client.Create(ctx, pod)).To(Succeed())
		_, err := f.WaitForPodRunning(ctx, ns, pod.Name, framework.DefaultTimeout)
		Expect(err).NotTo(HaveOccurred())

		res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: pod.Name,
			Command: []string{"sh", "-c", "echo persisted > /data/f && cat /data/f && id -u"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), "stderr: %s", res.Stderr)
		Expect(res.Stdout).To(Equal("persisted\n65532\n"))

		Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)).To(Succeed())
		Expect(pvc.Spec.VolumeName).NotTo(BeEmpty())
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvc.Spec.VolumeName}}
		Expect(f.Client.Delete(ctx, pod)).To(Succeed())
		Expect(f.Client.Delete(ctx, pvc)).To(Succeed())
		Expect(f.WaitForGone(ctx, pv, time.Minute)).To(Succeed(), "the released volume is deleted (reclaimPolicy Delete)")
	}, SpecTimeout(3*time.Minute))

	It("finishes deleting a namespace", func(ctx SpecContext) {
		ns, err := f.CreateNamespace(ctx, "nsdelete")
		Expect(err).NotTo(HaveOccurred())
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "content", Namespace: ns.Name}}
		Expect(f.Client.Create(ctx, cm)).To(Succeed())
		Expect(f.DeleteNamespace(ctx, ns.Name)).To(Succeed())
		Expect(f.WaitForGone(ctx, ns, time.Minute)).To(Succeed())
	}, SpecTimeout(2*time.Minute))

	It("routes ClusterIP Services from pods, including the kubernetes Service", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "net")

		server := framework.WorkspacePod(ns, "web")
		server.Spec.Containers[0].Command = []string{"sh", "-c",
			"mkdir -p /srv && echo served-by-web > /srv/index.txt && exec python3 -m http.server 8080 --directory /srv"}
		server.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
			TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)},
		}, PeriodSeconds: 1}
		Expect(f.Client.Create(ctx, server)).To(Succeed())
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "web"},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		Expect(f.Client.Create(ctx, svc)).To(Succeed())

		clientPod := framework.WorkspacePod(ns, "client")
		automount := true
		clientPod.Spec.AutomountServiceAccountToken = &automount
		Expect(f.Client.Create(ctx, clientPod)).To(Succeed())
		_, err := f.WaitForPodRunning(ctx, ns, server.Name, framework.DefaultTimeout)
		Expect(err).NotTo(HaveOccurred())
		_, err = f.WaitForPodRunning(ctx, ns, clientPod.Name, framework.DefaultTimeout)
		Expect(err).NotTo(HaveOccurred())

		res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: clientPod.Name, Command: []string{"sh", "-c", "command -v python3"}})
		Expect(err).NotTo(HaveOccurred())
		if res.ExitCode != 0 {
			Skip("the workspace image has no python3 (busybox fallback)")
		}

		// Pod -> ClusterIP -> pod (kube-proxy DNAT plus the bridge's hairpin/br_netfilter path).
		fetch := fmt.Sprintf("import urllib.request; print(urllib.request.urlopen('http://%s/index.txt', timeout=5).read().decode().strip())", svc.Spec.ClusterIP)
		Eventually(func(g Gomega) {
			res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: clientPod.Name, Command: []string{"python3", "-c", fetch}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.ExitCode).To(Equal(0), "stderr: %s", res.Stderr)
			g.Expect(strings.TrimSpace(res.Stdout)).To(Equal("served-by-web"))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())

		// Pod -> kubernetes Service -> API server, authenticated with the pod's ServiceAccount
		// token, the way an in-cluster operator connects.
		const apiCall = `import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
url = "https://%s:%s/version" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
req = urllib.request.Request(url, headers={"Authorization": "Bearer " + open(sa + "/token").read()})
print(json.load(urllib.request.urlopen(req, context=ctx, timeout=5))["gitVersion"])`
		res, err = f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: clientPod.Name, Command: []string{"python3", "-c", apiCall}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), "stderr: %s", res.Stderr)
		version, err := f.Clientset.Discovery().ServerVersion()
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(res.Stdout)).To(Equal(version.GitVersion))
	}, SpecTimeout(4*time.Minute))
})
