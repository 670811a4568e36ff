package webfetch

import (
	"net/netip"
	"testing"
)

func TestAddrClass(t *testing.T) {
	tests := []struct{ ip, want string }{
		{"127.0.0.1", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"192.168.1.1", "private"},
		{"fd00::1", "private"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"100.64.0.1", "shared (CGNAT)"},
		{"93.184.216.34", ""},
		{"2606:4700::1111", ""},
	}
	for _, tc := range tests {
		if got := addrClass(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("addrClass(%s) = %q, want %q", tc.ip, got, tc.want)
		}
	}
}

func TestAllowList(t *testing.T) {
	a := parseAllowList([]string{"web.svc.cluster.local:8080", "*.internal.example", "10.96.0.0/12", "192.168.1.7", "[fd00::5]:443", "Docs.Example.Com."})
	names := []struct {
		host string
		want bool
	}{
		{"web.svc.cluster.local", true},
		{"other.svc.cluster.local", false},
		{"a.internal.example", true},
		{"internal.example", false},
		{"docs.example.com", true},
		{"DOCS.example.com.", true},
	}
	for _, tc := range names {
		if got := a.name(tc.host); got != tc.want {
			t.Errorf("name(%s) = %v, want %v", tc.host, got, tc.want)
		}
	}
	addrs := []struct {
		ip   string
		want bool
	}{
		{"10.96.0.10", true},
		{"10.112.0.1", false},
		{"192.168.1.7", true},
		{"::ffff:192.168.1.7", true},
		{"192.168.1.8", false},
		{"fd00::5", true},
	}
	for _, tc := range addrs {
		if got := a.addr(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("addr(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
}
