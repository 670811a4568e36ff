package changes

import "net/http"

// SetTransport sets the HTTP transport of r's pushes (a test server's, to
// trust its TLS certificate).
func SetTransport(r *Recorder, rt http.RoundTripper) { r.transport = rt }
