package llmtest

import (
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// Constructor adapts an adapter's constructor to the New field of Suite and
// Recording: the returned function builds the adapter's configuration from
// the target with config, and fails the test if the constructor fails.
func Constructor[C any, L llm.Client](newClient func(C) (L, error), config func(Target) C) func(*testing.T, Target) llm.Client {
	return func(t *testing.T, tg Target) llm.Client {
		t.Helper()
		c, err := newClient(config(tg))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}
