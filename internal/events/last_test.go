package events

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// The leader's message get goes where the client library sends its own
// JetStream requests: the default prefix, a domain's, or a custom one.
func TestAPIPrefix(t *testing.T) {
	tests := []struct {
		name string
		opts jetstream.JetStreamOptions
		want string
	}{
		{"default", jetstream.JetStreamOptions{}, "$JS.API."},
		{"domain", jetstream.JetStreamOptions{Domain: "hub"}, "$JS.hub.API."},
		{"custom prefix", jetstream.JetStreamOptions{APIPrefix: "acct.JS.API"}, "acct.JS.API."},
		{"custom prefix with its dot", jetstream.JetStreamOptions{APIPrefix: "acct.JS.API."}, "acct.JS.API."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := apiPrefix(tt.opts); got != tt.want {
				t.Errorf("apiPrefix = %q, want %q", got, tt.want)
			}
		})
	}
}
