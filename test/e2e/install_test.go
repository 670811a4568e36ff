//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// installOperator helm-installs the chart as release into a new namespace named after prefix,
// with the suite's images and the extra `--set` values sets, waits for the manager, and
// registers the uninstall. Call it from BeforeAll. Every cluster-scoped object of the chart is
// named after the release, so releases of different containers never collide; the suite runs
// containers one after another, so only one manager runs sessions at a time.
func installOperator(ctx context.Context, release, prefix string, sets ...string) string {
	GinkgoHelper()
	Expect(agentsv1.AddToScheme(f.Scheme)).To(Succeed())
	ns, err := f.CreateNamespace(ctx, prefix)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx context.Context) {
		if out, err := helm(ctx, "uninstall", release, "--namespace", ns.Name, "--wait", "--timeout", "2m"); err != nil {
			GinkgoWriter.Printf("helm uninstall %s: %v\n%s\n", release, err, out)
		}
		Expect(f.DeleteNamespace(ctx, ns.Name)).To(Succeed())
	}, NodeTimeout(3*time.Minute))
	root, err := framework.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	repo, tag := splitImage(framework.ManagerImage)
	args := []string{"upgrade", "--install", release, filepath.Join(root, "charts", "agent-operator"),
		"--namespace", ns.Name, "--wait", "--timeout", "3m",
		"--set", "image.repository=" + repo, "--set", "image.tag=" + tag,
		"--set", "image.pullPolicy=" + string(framework.ImagePullPolicy),
		"--set", "workspace.image=" + framework.WorkspaceImage,
		"--set", "workspace.executorImage=" + framework.ExecutorImage,
		"--set", "workspace.pullPolicy=" + string(framework.ImagePullPolicy),
		"--set", "sessionClass=" + framework.SessionClass}
	for _, set := range sets {
		args = append(args, "--set", set)
	}
	out, err := helm(ctx, args...)
	if err != nil {
		f.DumpNamespace(ctx, ns.Name, GinkgoWriter)
	}
	Expect(err).NotTo(HaveOccurred(), "helm upgrade --install %s:\n%s", release, out)
	return ns.Name
}

// operator is what withOperator set up for an Ordered container.
type operator struct {
	// ns is the namespace of the release; plugin is the kubectl-agent binary.
	ns, plugin string
}

// withOperator registers in the calling Ordered container a BeforeAll that helm-installs the
// chart as release and builds the plugin, and an AfterEach that dumps the operator's
// namespace when a spec failed.
func withOperator(release, prefix string, sets ...string) *operator {
	op := &operator{}
	BeforeAll(func(ctx SpecContext) {
		op.ns = installOperator(ctx, release, prefix, sets...)
		bin, err := framework.BuildPlugin(ctx, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		op.plugin = bin
	}, NodeTimeout(8*time.Minute))
	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() && op.ns != "" {
			f.DumpNamespace(ctx, op.ns, GinkgoWriter)
		}
	})
	return op
}

// helm runs the helm binary that hack/go-tool.sh builds into the cache (the same one
// `make tools` and hack/demo.sh use) and returns its combined output.
func helm(ctx context.Context, args ...string) (string, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	version := "v3.22.0"
	if b, err := os.ReadFile(filepath.Join(root, "hack", "versions.env")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "HELM_VERSION="); ok {
				version = strings.Trim(v, `"'`)
			}
		}
	}
	var stderr bytes.Buffer
	tool := exec.CommandContext(ctx, filepath.Join(root, "hack", "go-tool.sh"), "helm", "helm.sh/helm/v3", version, "helm.sh/helm/v3/cmd/helm")
	tool.Stderr = &stderr
	path, err := tool.Output()
	if err != nil {
		return stderr.String(), fmt.Errorf("build helm with hack/go-tool.sh: %w", err)
	}
	cmd := exec.CommandContext(ctx, strings.TrimSpace(string(path)), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w", args[0], err)
	}
	return string(out), nil
}

// kubeconfig is the file the suite connected with: KUBECONFIG, else ~/.kube/config.
func kubeconfig() string {
	if v := os.Getenv("KUBECONFIG"); v != "" {
		return v
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".kube", "config")
}

// splitImage splits "repo:tag" (the tag defaults to latest).
func splitImage(image string) (string, string) {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, "latest"
}

// externalNATSOperator is what withExternalNATS set up: the operator, and the NATS it
// journals to.
type externalNATSOperator struct {
	operator
	// natsNS is the namespace of the NATS servers; url is their client URL.
	natsNS, url string
}

// withExternalNATS registers in the calling Ordered container a BeforeAll that starts NATS
// with start in a new namespace (prefix natsPrefix), helm-installs release on it
// (nats.mode=external, plus sets) and builds the plugin, and an AfterEach that dumps both
// namespaces when a spec failed. The NATS namespace's cleanup is registered first, so the
// release is uninstalled before NATS goes away.
func withExternalNATS(release, natsPrefix string, start func(ctx context.Context, ns string) string, sets ...string) *externalNATSOperator {
	op := &externalNATSOperator{}
	BeforeAll(func(ctx SpecContext) {
		op.natsNS = f.SpecNamespace(ctx, natsPrefix)
		began := time.Now()
		op.url = start(ctx, op.natsNS)
		GinkgoWriter.Printf("NATS in %s ready at %s after %s\n", op.natsNS, op.url, time.Since(began).Round(time.Millisecond))
		op.ns = installOperator(ctx, release, release, append([]string{"nats.mode=external", "nats.external.url=" + op.url}, sets...)...)
		bin, err := framework.BuildPlugin(ctx, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		op.plugin = bin
	}, NodeTimeout(12*time.Minute))
	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			for _, ns := range []string{op.ns, op.natsNS} {
				if ns != "" {
					f.DumpNamespace(ctx, ns, GinkgoWriter)
				}
			}
		}
	})
	return op
}
