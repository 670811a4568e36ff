//go:build e2e

// Package e2e is the end-to-end suite. It runs against the cluster KUBECONFIG points at:
//
//	make e2e                                  # local cluster (hack/cluster.sh), or KUBECONFIG if set
//	go test -tags e2e ./test/e2e/... -ginkgo.v
package e2e

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

var (
	// f is the suite's connection to the cluster.
	f *framework.Framework
	// suiteNamespace is shared by specs that do not need isolation.
	suiteNamespace string
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "agent-operator e2e")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	var err error
	f, err = framework.New(ctx)
	Expect(err).NotTo(HaveOccurred(), "connect to the cluster named by KUBECONFIG")
	GinkgoWriter.Printf("cluster: %s\n", f.Config.Host)

	applied, err := f.InstallOperator(ctx)
	Expect(err).NotTo(HaveOccurred(), "install the operator")
	if len(applied) == 0 {
		GinkgoWriter.Printf("InstallOperator: no config/crd/bases yet, nothing installed\n")
	} else {
		GinkgoWriter.Printf("InstallOperator: applied %v\n", applied)
	}

	ns, err := f.CreateNamespace(ctx, "e2e-suite")
	Expect(err).NotTo(HaveOccurred())
	suiteNamespace = ns.Name
	DeferCleanup(func(ctx context.Context) {
		Expect(f.DeleteNamespace(ctx, suiteNamespace)).To(Succeed())
	})
})

// Specs that use the shared namespace get it dumped when they fail (SpecNamespace does the
// same for per-spec namespaces).
var _ = AfterEach(func(ctx SpecContext) {
	if CurrentSpecReport().Failed() && suiteNamespace != "" {
		f.DumpNamespace(ctx, suiteNamespace, GinkgoWriter)
	}
})
