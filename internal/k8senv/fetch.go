package k8senv

import (
	"context"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

var _ tool.Fetcher = (*Env)(nil)

// Fetch implements tool.Fetcher: the pod's executor fetches the URL, so the
// pod's NetworkPolicy applies.
func (e *Env) Fetch(ctx context.Context, req tool.FetchRequest) (res *tool.FetchResult, err error) {
	err = e.with(ctx, func(ctx context.Context, c *executor.Client) error {
		res, err = c.Fetch(ctx, req)
		return err
	})
	return res, err
}
