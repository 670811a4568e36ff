package changes

import (
	"context"
	"net/http"
)

// SetTransport sets the HTTP transport of r's pushes (a test server's, to
// trust its TLS certificate).
func SetTransport(r *Recorder, rt http.RoundTripper) { r.transport = rt }

// HoldBytes holds n bytes of r's budget of bytes in flight, as a
// recording of another session would.
func HoldBytes(t interface{ Fatal(...any) }, r *Recorder, n int64) func() {
	release, err := r.bytes().hold(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return release
}

// WaitingForBytes is how many reads wait for r's budget.
func WaitingForBytes(r *Recorder) int { return int(r.bytes().waiting.Load()) }
