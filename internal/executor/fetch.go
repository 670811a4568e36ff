package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// OpFetch fetches a URL from the executor's host (the workspace pod): the
// body is a tool.FetchRequest, the result a tool.FetchResult. Servers whose
// environment cannot fetch, and servers that predate the op, answer with
// CodeUnknownOp.
const OpFetch = "fetch"

// fetch answers an OpFetch call.
func (s *server) fetch(ctx context.Context, f *Frame) *Frame {
	var req tool.FetchRequest
	if len(f.Body) > 0 {
		if err := json.Unmarshal(f.Body, &req); err != nil {
			return &Frame{Kind: KindError, Error: wireErrorf(CodeBadRequest, "%s: decode arguments: %v", f.Op, err)}
		}
	}
	res, err := tool.Fetch(ctx, s.env, req)
	if errors.Is(err, tool.ErrFetchUnsupported) {
		return &Frame{Kind: KindError, Error: wireErrorf(CodeUnknownOp, "%s: this executor's environment cannot fetch URLs", f.Op)}
	}
	if err != nil {
		return &Frame{Kind: KindError, Error: toWire(err)}
	}
	return &Frame{Kind: KindResult, Body: mustJSON(res)}
}

var _ tool.Fetcher = (*Client)(nil)

// Fetch implements tool.Fetcher: the executor fetches req.URL from its own
// host. An executor without the op fails with an error wrapping
// tool.ErrFetchUnsupported.
func (c *Client) Fetch(ctx context.Context, req tool.FetchRequest) (*tool.FetchResult, error) {
	var res tool.FetchResult
	if err := c.do(ctx, OpFetch, req, &res, nil); err != nil {
		var re *RemoteError
		if errors.As(err, &re) && re.Code == CodeUnknownOp {
			return nil, fmt.Errorf("%s: %w: the workspace's executor is too old for web_fetch (update the executor-sidecar image)", OpFetch, tool.ErrFetchUnsupported)
		}
		return nil, err
	}
	return &res, nil
}
