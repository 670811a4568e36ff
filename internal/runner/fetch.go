package runner

import (
	"context"
	"slices"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop/builtin"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Fetch implements tool.Fetcher (tool.ErrFetchUnsupported when env has none).
func (e *ownerCheckedEnv) Fetch(ctx context.Context, req tool.FetchRequest) (*tool.FetchResult, error) {
	res, err := tool.Fetch(ctx, e.ExecutionEnvironment, req)
	return res, e.check(err)
}

// webFetchTool returns the web_fetch tool of spec.tools.webFetch, or nil
// when it is not enabled. Private addresses are allowed for the hosts of
// spec.workspace.allowedEgressHosts: listing a host there already lets the
// workspace reach it.
func webFetchTool(spec *agentsv1.AgentSessionSpec) *tool.Registered {
	wf := spec.Tools.WebFetch
	if wf == nil || !wf.Enabled {
		return nil
	}
	opts := builtin.WebFetchOptions{
		MaxCalls:     int(wf.MaxCalls),
		MaxBytes:     wf.MaxBytes,
		AllowPrivate: wf.AllowPrivateAddresses,
		AllowHosts:   slices.Clone(spec.Workspace.AllowedEgressHosts),
	}
	if wf.Timeout != nil {
		opts.Timeout = wf.Timeout.Duration
	}
	t := builtin.WebFetch(opts)
	return &t
}
