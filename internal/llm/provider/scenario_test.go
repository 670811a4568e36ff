package provider_test

import (
	"testing"

	"github.com/agent-operator/agent-operator/internal/looptest"
)

// TestEndToEndScenario is the end-to-end test of seed 000 §9.13 for the
// three profiles (one parallel subtest each), driving a loop Session through
// each real adapter (its official SDK, over HTTP) against the llmtest fake
// server of its wire protocol. The steps are those of looptest.RunScenario.
func TestEndToEndScenario(t *testing.T) {
	looptest.RunScenario(t, adapterClient)
}
