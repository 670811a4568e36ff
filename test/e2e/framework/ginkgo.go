package framework

import (
	"context"

	"github.com/onsi/ginkgo/v2"
)

// SpecNamespace creates a fresh namespace for the current spec (or container, when called
// from BeforeAll) and registers its cleanup: if the spec failed, the namespace is dumped to
// the GinkgoWriter first; then its deletion is started without waiting for it to finish.
func (f *Framework) SpecNamespace(ctx context.Context, prefix string) string {
	ginkgo.GinkgoHelper()
	ns, err := f.CreateNamespace(ctx, prefix)
	if err != nil {
		ginkgo.Fail(err.Error())
	}
	ginkgo.DeferCleanup(func(ctx context.Context) {
		if ginkgo.CurrentSpecReport().Failed() {
			f.DumpNamespace(ctx, ns.Name, ginkgo.GinkgoWriter)
		}
		if err := f.DeleteNamespace(ctx, ns.Name); err != nil {
			ginkgo.GinkgoWriter.Printf("cleanup: %v\n", err)
		}
	})
	return ns.Name
}
