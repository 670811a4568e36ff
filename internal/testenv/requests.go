package testenv

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// Requests counts, by method, the API requests made with a config that
// CountRequests returned.
type Requests struct {
	next  http.RoundTripper
	match string
	mu    sync.Mutex
	n     map[string]int
}

// CountRequests returns a copy of cfg whose requests whose path contains
// pathContains ("" for all) are counted by the returned Requests.
func CountRequests(cfg *rest.Config, pathContains string) (*rest.Config, *Requests) {
	r := &Requests{match: pathContains, n: map[string]int{}}
	counted := rest.CopyConfig(cfg)
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper { r.next = rt; return r })
	return counted, r
}

func (r *Requests) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.URL.Path, r.match) {
		r.mu.Lock()
		r.n[req.Method]++
		r.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

// Take returns the counts since the last Take and starts again from none.
func (r *Requests) Take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	r.n = map[string]int{}
	return n
}
