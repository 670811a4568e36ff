package loop

import (
	"context"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Fetch implements tool.Fetcher for the tools' environment: URLs are not
// paths, so the path rules do not apply (tool.ErrFetchUnsupported when the
// session's environment cannot fetch).
func (e *guardedEnv) Fetch(ctx context.Context, req tool.FetchRequest) (*tool.FetchResult, error) {
	return tool.Fetch(ctx, e.ExecutionEnvironment, req)
}
