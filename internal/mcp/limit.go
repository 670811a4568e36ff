package mcp

import (
	"fmt"
	"io"
	"mime"
	"net/http"
)

// MaxResponseBytes bounds one message the manager reads from an MCP server:
// the body of an HTTP response that is not an event stream (a streamable
// HTTP server's application/json answer, an error page), one server-sent
// event, and one line of a stdio server. It is the SDK's own bound of an
// event and of a stdio line (sdk.DefaultMaxEventSize,
// sdk.DefaultMaxLineLength), which the SDK does not apply to a JSON body:
// without it a server answering with an endless JSON body made the shared
// manager allocate until it ran out of memory. A larger response fails its
// call (or connecting) with "response larger than MaxResponseBytes bytes".
const MaxResponseBytes = 16 << 20 // 16 MiB

// limitTransport bounds the response bodies the SDK reads: a body that is
// not an event stream fails its reader once more than limit bytes have
// been read. Event streams are bounded per event by the SDK instead
// (MaxEventSize), as a stream lives as long as its session.
type limitTransport struct {
	server string // named in the error
	limit  int64
	base   http.RoundTripper
}

func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	// The SDK reads a body as an event stream by the same parse of its
	// Content-Type; anything else it may read whole.
	if mediaType, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && mediaType == "text/event-stream" {
		return resp, nil
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.limit, err: &responseTooLargeError{server: t.server, limit: t.limit}}
	return resp, nil
}

// limitedBody reads at most left bytes of rc; reading more fails with err.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	err  error
	over bool // err was returned: no further byte is read
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, b.err
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte more than allowed tells "more" from "exactly left"
	}
	n, err := b.rc.Read(p)
	if int64(n) <= b.left {
		b.left -= int64(n)
		return n, err
	}
	n, b.left, b.over = int(b.left), 0, true
	return n, b.err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// responseTooLargeError is the error of a response body larger than the
// limit. It names the server itself, as the SDK keeps only its text.
type responseTooLargeError struct {
	server string
	limit  int64
}

func (e *responseTooLargeError) Error() string {
	return fmt.Sprintf("mcp server %s: response larger than %d bytes", e.server, e.limit)
}
