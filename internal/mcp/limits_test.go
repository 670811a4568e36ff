package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-operator/agent-operator/internal/mcp"
)

// A hostile or broken server offering more tools than MaxListedTools (or
// paging forever) costs the manager at most MaxListedTools tools and the
// pages that hold them; the rest are left out with a warning.
func TestListingStopsAtMaxListedTools(t *testing.T) {
	const pageSize = 100
	srv := sdk.NewServer(&sdk.Implementation{Name: "many", Version: "v1"}, &sdk.ServerOptions{PageSize: pageSize})
	for i := range mcp.MaxListedTools + 2*pageSize {
		sdk.AddTool(srv, &sdk.Tool{Name: fmt.Sprintf("t%05d", i), Description: "One of many."},
			func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
				return &sdk.CallToolResult{}, nil, nil
			})
	}
	var pages atomic.Int32
	srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "tools/list" {
				pages.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(ts.Close)

	c, err := mcp.Connect(t.Context(), mcp.Server{Name: "many", URL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := len(c.Tools()); n != mcp.MaxListedTools {
		t.Errorf("%d tools offered, want %d", n, mcp.MaxListedTools)
	}
	if n, most := pages.Load(), int32(mcp.MaxListedTools/pageSize+1); n > most {
		t.Errorf("%d tools/list pages asked for, want at most %d", n, most)
	}
	want := fmt.Sprintf("offers more than %d tools", mcp.MaxListedTools)
	if !strings.Contains(strings.Join(c.Warnings(), "\n"), want) {
		t.Errorf("warnings %q do not say %q", c.Warnings(), want)
	}
}
