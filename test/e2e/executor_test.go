//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/k8senv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// plainImage is an image without the executor inside (a busybox userland,
// hack/images' agent-operator/busybox:dev by default); its pods get the
// executor from the init container.
var plainImage = func() string {
	if v := os.Getenv("E2E_PLAIN_IMAGE"); v != "" {
		return v
	}
	return "agent-operator/busybox:dev"
}()

// executorPod is a pod of image whose executor is installed by an init
// container from the executor image into a shared emptyDir, and whose main
// container idles under `executor-sidecar idle`.
func executorPod(namespace, name, image string) *corev1.Pod {
	zero := int64(0)
	mounts := []corev1.VolumeMount{{Name: "agent-bin", MountPath: "/agent/bin"}, {Name: "workspace", MountPath: "/workspace"}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": name, "e2e/executor": "yes"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  new(bool),
			Volumes: []corev1.Volume{
				{Name: "agent-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			InitContainers: []corev1.Container{{
				Name:            "install-executor",
				Image:           framework.ExecutorImage,
				ImagePullPolicy: framework.ImagePullPolicy,
				Command:         []string{"/executor-sidecar", "copy-to", "/agent/bin"},
				VolumeMounts:    mounts[:1],
			}},
			Containers: []corev1.Container{{
				Name:            "workspace",
				Image:           image,
				ImagePullPolicy: framework.ImagePullPolicy,
				Command:         []string{"/agent/bin/executor-sidecar", "idle"},
				WorkingDir:      "/workspace",
				VolumeMounts:    mounts,
			}},
		},
	}
}

var _ = Describe("executor over a persistent exec stream", func() {
	var ns string

	BeforeEach(func(ctx SpecContext) {
		ns = f.SpecNamespace(ctx, "executor")
	}, NodeTimeout(time.Minute))

	startPod := func(ctx context.Context, name, image string) (*k8senv.Pool, *k8senv.Env) {
		GinkgoHelper()
		Expect(f.Client.Create(ctx, executorPod(ns, name, image))).To(Succeed())
		_, err := f.WaitForPodRunning(ctx, ns, name, framework.DefaultTimeout)
		Expect(err).NotTo(HaveOccurred())
		pool, err := k8senv.NewPool(k8senv.Config{REST: f.Config, Client: f.Clientset})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(pool.Close)
		env := pool.Env(k8senv.Target{Namespace: ns, Pod: name, Container: "workspace",
			Expect: k8senv.Expect{Labels: map[string]string{"app": name}}})
		return pool, env
	}

	DescribeTable("serves every operation",
		func(ctx SpecContext, image string) {
			_, env := startPod(ctx, "ops", image)
			Expect(env.Initialize(ctx)).To(Succeed())
			Expect(env.Platform()).To(Equal("linux"))
			Expect(env.WorkingDirectory()).To(Equal("/workspace"))

			Expect(env.WriteFile(ctx, "src/main.go", []byte("package main\n\nfunc main() {}\n"))).To(Succeed())
			fc, err := env.ReadFile(ctx, "src/main.go", tool.ReadOptions{Offset: 3})
			Expect(err).NotTo(HaveOccurred())
			Expect(string(fc.Content)).To(Equal("func main() {}\n"))
			Expect(fc.TotalLines).To(Equal(3))

			ok, err := env.FileExists(ctx, "src")
			Expect(err).NotTo(HaveOccurred())
			Expect(ok).To(BeTrue())
			ents, err := env.ListDirectory(ctx, ".", 2)
			Expect(err).NotTo(HaveOccurred())
			Expect(ents).To(ContainElement(tool.DirEntry{Name: "src/main.go", Size: 29}))

			gr, err := env.Grep(ctx, "func", "", tool.GrepOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(gr.Matches).To(Equal([]tool.GrepMatch{{Path: "src/main.go", Line: 3, Text: "func main() {}"}}))
			paths, err := env.Glob(ctx, "**/*.go", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(paths).To(Equal([]string{"src/main.go"}))

			var mu sync.Mutex
			var streamed strings.Builder
			res, err := env.ExecCommand(ctx, "cat src/main.go | wc -l; echo oops >&2; exit 3", tool.ExecOptions{
				OnOutput: func(b []byte) { mu.Lock(); streamed.Write(b); mu.Unlock() },
			})
			Expect(err).NotTo(HaveOccurred())
			Expect(strings.TrimSpace(res.Stdout)).To(Equal("3"))
			Expect(res.Stderr).To(Equal("oops\n"))
			Expect(res.ExitCode).To(Equal(3))
			mu.Lock()
			Expect(streamed.String()).To(ContainSubstring("oops"))
			mu.Unlock()

			res, err = env.ExecCommand(ctx, "echo partial; sleep 60", tool.ExecOptions{Timeout: time.Second})
			Expect(err).NotTo(HaveOccurred())
			Expect(res.TimedOut).To(BeTrue())
			Expect(res.Stdout).To(Equal("partial\n"))

			_, err = env.ReadFile(ctx, "../etc/passwd", tool.ReadOptions{})
			Expect(errors.Is(err, tool.ErrPathEscapes)).To(BeTrue(), "got %v", err)
			_, err = env.ReadFile(ctx, "/etc/passwd", tool.ReadOptions{})
			Expect(errors.Is(err, tool.ErrPathEscapes)).To(BeTrue(), "got %v", err)

			Expect(env.DeleteFile(ctx, "src/main.go")).To(Succeed())
			_, err = env.ReadFile(ctx, "src/main.go", tool.ReadOptions{})
			Expect(errors.Is(err, tool.ErrNotFound)).To(BeTrue(), "got %v", err)
			Expect(env.Cleanup(ctx)).To(Succeed())
		},
		Entry("workspace image", framework.WorkspaceImage, SpecTimeout(4*time.Minute)),
		Entry("plain image without an executor", plainImage, SpecTimeout(4*time.Minute)),
	)

	It("stops the remote command when a call is cancelled", func(ctx SpecContext) {
		_, env := startPod(ctx, "cancel", framework.WorkspaceImage)
		cctx, cancel := context.WithCancel(ctx)
		var mu sync.Mutex
		var out strings.Builder
		res, err := env.ExecCommand(cctx, "echo pid=$$; sleep 600", tool.ExecOptions{
			Timeout: 10 * time.Minute,
			OnOutput: func(b []byte) {
				mu.Lock()
				defer mu.Unlock()
				out.Write(b)
				if strings.Contains(out.String(), "\n") {
					cancel()
				}
			},
		})
		Expect(errors.Is(err, context.Canceled)).To(BeTrue(), "got %v", err)
		Expect(res).NotTo(BeNil())
		pid := strings.TrimSpace(strings.TrimPrefix(res.Stdout, "pid="))
		_, err = strconv.Atoi(pid)
		Expect(err).NotTo(HaveOccurred(), "partial output %q", res.Stdout)
		// Seen from a separate exec: the process group is gone.
		check, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: "cancel", Container: "workspace",
			Command: []string{"sh", "-c", "kill -0 " + pid + " 2>/dev/null && echo alive || echo gone"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(check.Stdout)).To(Equal("gone"))
	}, SpecTimeout(3*time.Minute))

	It("fails the call in flight when the stream dies and reconnects on the next call", func(ctx SpecContext) {
		_, env := startPod(ctx, "drop", framework.WorkspaceImage)
		started := make(chan string, 1)
		var mu sync.Mutex
		var out strings.Builder
		errc := make(chan error, 1)
		go func() {
			defer GinkgoRecover()
			_, err := env.ExecCommand(ctx, "echo pids=$PPID,$$; sleep 600", tool.ExecOptions{
				Timeout: 10 * time.Minute,
				OnOutput: func(b []byte) {
					mu.Lock()
					defer mu.Unlock()
					out.Write(b)
					if strings.Contains(out.String(), "\n") {
						select {
						case started <- strings.TrimSpace(out.String()):
						default:
						}
					}
				},
			})
			errc <- err
		}()
		var sidecar, command int
		select {
		case line := <-started:
			_, err := fmt.Sscanf(line, "pids=%d,%d", &sidecar, &command)
			Expect(err).NotTo(HaveOccurred(), "output %q", line)
		case <-ctx.Done():
			Fail("the command never started")
		}
		// Kill the sidecar serving the stream (and the orphaned command).
		_, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: "drop", Container: "workspace",
			Command: []string{"sh", "-c", fmt.Sprintf("kill -9 %d; kill -9 -%d", sidecar, command)}})
		Expect(err).NotTo(HaveOccurred())
		select {
		case err := <-errc:
			Expect(errors.Is(err, executor.ErrStreamClosed)).To(BeTrue(), "got %v", err)
			Expect(err.Error()).To(ContainSubstring("in flight"))
		case <-time.After(time.Minute):
			Fail("the call in flight did not fail after its stream died")
		}
		res, err := env.ExecCommand(ctx, "echo again", tool.ExecOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Stdout).To(Equal("again\n"))
	}, SpecTimeout(3*time.Minute))

	It("refuses a pod that does not carry the expected labels", func(ctx SpecContext) {
		pool, _ := startPod(ctx, "labels", framework.WorkspaceImage)
		env := pool.Env(k8senv.Target{Namespace: ns, Pod: "labels", Container: "workspace",
			Expect: k8senv.Expect{Labels: map[string]string{"app": "someone-else"}}})
		_, err := env.FileExists(ctx, ".")
		Expect(errors.Is(err, k8senv.ErrPodMismatch)).To(BeTrue(), "got %v", err)
	}, SpecTimeout(3*time.Minute))
})
