package tool_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// onlyEnv hides every optional interface of the environment it wraps.
type onlyEnv struct{ tool.ExecutionEnvironment }

func TestFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	t.Cleanup(srv.Close)
	env, err := localenv.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	req := tool.FetchRequest{URL: srv.URL, AllowPrivate: true}
	tests := []struct {
		name    string
		env     tool.ExecutionEnvironment
		wantErr error
	}{
		{"fetcher", env, nil},
		{"scoped fetcher", tool.Scoped(env, "sub"), nil},
		{"no fetcher", onlyEnv{env}, tool.ErrFetchUnsupported},
		{"scoped without fetcher", tool.Scoped(onlyEnv{env}, "sub"), tool.ErrFetchUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := tool.Fetch(t.Context(), tc.env, req)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || res.Text != "hello" {
				t.Fatalf("Fetch = %+v, %v", res, err)
			}
		})
	}
}
