package mcp

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// refusedAddr reports why the manager must not connect to ip, or "" when
// it may. Link-local addresses are where clouds serve instance metadata and
// credentials (169.254.169.254, fd00:ec2::254 is unique-local and stays
// reachable); unspecified and multicast addresses are never a server.
func refusedAddr(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return "a link-local address (cloud instance metadata)"
	case ip.IsUnspecified():
		return "the unspecified address"
	case ip.IsMulticast():
		return "a multicast address"
	}
	return ""
}

// guardedTransport is http.DefaultTransport's setup with a dialer that
// refuses the addresses refusedAddr names, checked on the address actually
// dialled (after name resolution, so a DNS name pointing there is refused
// too).
func guardedTransport() http.RoundTripper {
	d := &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("mcp: dial %s: %w", address, err)
			}
			if why := refusedAddr(ap.Addr()); why != "" {
				return fmt.Errorf("mcp: refusing to connect to %s: %s", address, why)
			}
			return nil
		},
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = d.DialContext
	return t
}
