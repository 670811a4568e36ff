package loop_test

import (
	"testing"

	"github.com/agent-operator/agent-operator/internal/looptest"
)

// TestEndToEndScenario is the end-to-end test of seed 000 §9.13 for the
// three profiles (one parallel subtest each), with the in-memory scripted
// client standing in for the real APIs. The steps are those of
// looptest.RunScenario, which internal/llm/provider runs over the real
// adapters.
func TestEndToEndScenario(t *testing.T) {
	looptest.RunScenario(t, scriptedClient)
}
