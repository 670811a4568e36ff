package k8senv

import (
	"context"

	"github.com/agent-operator/agent-operator/internal/executor"
)

// WriteFileIf implements tool.ConditionalWriter: the executor sidecar writes
// content only if the file still has the SHA-256 ifSHA256 ("" = must not
// exist), serialized with the other mutations of the path.
func (e *Env) WriteFileIf(ctx context.Context, path string, content []byte, ifSHA256 string) error {
	return e.with(ctx, func(ctx context.Context, c *executor.Client) error {
		return c.WriteFileIf(ctx, path, content, ifSHA256)
	})
}
