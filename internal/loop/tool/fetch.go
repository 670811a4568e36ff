package tool

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Fetcher is implemented by environments that can fetch a URL from where
// their commands run (the workspace pod), so the network rules of that place
// apply to the fetch. It is optional: use Fetch, which reports
// ErrFetchUnsupported for environments without it.
type Fetcher interface {
	Fetch(ctx context.Context, req FetchRequest) (*FetchResult, error)
}

// ErrFetchUnsupported is wrapped by Fetch errors of environments that cannot
// fetch URLs (or whose remote end is too old to).
var ErrFetchUnsupported = errors.New("the environment cannot fetch URLs")

// FetchRequest is one HTTP(S) GET.
type FetchRequest struct {
	URL string `json:"url"`
	// MaxBytes bounds the response body read (0: the implementation's
	// default); a longer body is cut and the result marked Truncated.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// Timeout bounds the whole fetch, redirects and body included (0: the
	// implementation's default).
	Timeout time.Duration `json:"timeout,omitempty"`
	// AllowPrivate permits loopback, private, link-local, unspecified and
	// multicast addresses, which are refused otherwise.
	AllowPrivate bool `json:"allowPrivate,omitempty"`
	// AllowHosts permits those addresses for matching targets only: host
	// names ("example.internal", "*.svc.cluster.local"), IPv4 or IPv6
	// addresses and CIDRs, each optionally with ":port" (ignored).
	AllowHosts []string `json:"allowHosts,omitempty"`
}

// FetchResult is a fetched document, converted to text.
type FetchResult struct {
	URL         string `json:"url"` // after redirects
	Status      int    `json:"status"`
	ContentType string `json:"contentType,omitempty"`
	// Text is the body as text: HTML converted to Markdown-like text, other
	// textual types as they are.
	Text string `json:"text"`
	// Truncated is set when the body was longer than MaxBytes.
	Truncated bool `json:"truncated,omitempty"`
	// Bytes is how many bytes of the body were read.
	Bytes int64 `json:"bytes"`
}

// Fetch fetches through env's Fetcher, or fails with an error wrapping
// ErrFetchUnsupported when env has none.
func Fetch(ctx context.Context, env ExecutionEnvironment, req FetchRequest) (*FetchResult, error) {
	if f, ok := env.(Fetcher); ok {
		return f.Fetch(ctx, req)
	}
	return nil, fmt.Errorf("fetch %s: %w", req.URL, ErrFetchUnsupported)
}

// Fetch implements Fetcher for a scoped environment.
func (e *scoped) Fetch(ctx context.Context, req FetchRequest) (*FetchResult, error) {
	return Fetch(ctx, e.ExecutionEnvironment, req)
}
