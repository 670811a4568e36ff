package localenv

import (
	"context"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/webfetch"
)

var _ tool.Fetcher = (*Env)(nil)

// Fetch implements tool.Fetcher: it fetches req.URL from this host with
// the address rules of req (see package webfetch).
func (e *Env) Fetch(ctx context.Context, req tool.FetchRequest) (*tool.FetchResult, error) {
	return webfetch.Fetch(ctx, req)
}
