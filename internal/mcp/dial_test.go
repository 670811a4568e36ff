package mcp

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

func TestRefusedAddr(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		refused bool
	}{
		{"169.254.169.254", true},
		{"fe80::1", true},
		{"::ffff:169.254.169.254", true},
		{"0.0.0.0", true},
		{"224.0.0.1", true},
		{"10.96.0.10", false},
		{"127.0.0.1", false},
		{"fd00:ec2::254", false},
		{"93.184.216.34", false},
	} {
		if got := refusedAddr(netip.MustParseAddr(tc.addr)) != ""; got != tc.refused {
			t.Errorf("refusedAddr(%s) = %v, want %v", tc.addr, got, tc.refused)
		}
	}
}

// A server URL pointing at the cloud metadata address is refused before any
// byte is sent, also when a name resolves there.
func TestConnectRefusesLinkLocal(t *testing.T) {
	for _, u := range []string{"http://169.254.169.254/mcp", "http://[fe80::1%25lo]:8080/mcp"} {
		_, err := Connect(context.Background(), Server{Name: "meta", URL: u})
		if err == nil || !strings.Contains(err.Error(), "refusing to connect") {
			t.Errorf("Connect(%s) = %v, want a refusal", u, err)
		}
	}
}
