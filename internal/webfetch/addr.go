package webfetch

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrRefusedAddress is wrapped by errors of fetches whose target (or a
// redirect's) resolved to an address that is not allowed.
var ErrRefusedAddress = errors.New("address not allowed")

// refusedError names the host and the address it resolved to.
type refusedError struct {
	host string
	ip   netip.Addr
}

func (e *refusedError) Error() string {
	if e.host != "" && e.host != e.ip.String() {
		return fmt.Sprintf("%s resolves to %s, a %s address: %v (web_fetch refuses private, loopback and link-local addresses unless the session allows them)",
			e.host, e.ip, addrClass(e.ip), ErrRefusedAddress)
	}
	return fmt.Sprintf("%s is a %s address: %v (web_fetch refuses private, loopback and link-local addresses unless the session allows them)",
		e.ip, addrClass(e.ip), ErrRefusedAddress)
}

func (e *refusedError) Unwrap() error { return ErrRefusedAddress }

var (
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10") // carrier-grade NAT (RFC 6598)
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
)

// addrClass returns why ip is internal, or "" for a public address.
func addrClass(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsUnspecified(), thisNetwork.Contains(ip):
		return "unspecified"
	case ip.IsMulticast():
		return "multicast"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsPrivate():
		return "private"
	case sharedSpace.Contains(ip):
		return "shared (CGNAT)"
	}
	return ""
}

// allowList is AllowHosts parsed.
type allowList struct {
	names    []string // lower case, without a trailing dot
	suffixes []string // ".domain" of "*.domain"
	prefixes []netip.Prefix
}

// parseAllowList parses host names, "*.domain" wildcards, addresses and
// CIDRs, each optionally followed by ":port" (ignored: the check is on
// addresses). Entries that are none of these are ignored.
func parseAllowList(entries []string) allowList {
	var a allowList
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(stripPort(e)); err == nil {
			a.prefixes = append(a.prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(strings.Trim(stripPort(e), "[]")); err == nil {
			a.prefixes = append(a.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		h := strings.TrimSuffix(stripPort(e), ".")
		if d, ok := strings.CutPrefix(h, "*."); ok {
			a.suffixes = append(a.suffixes, "."+d)
			continue
		}
		a.names = append(a.names, h)
	}
	return a
}

// stripPort removes a trailing ":port" from host names, IPv4 addresses and
// CIDRs and from bracketed IPv6 addresses; a bare IPv6 address is kept.
func stripPort(e string) string {
	if strings.HasPrefix(e, "[") {
		if i := strings.Index(e, "]"); i > 0 {
			return e[:i+1]
		}
		return e
	}
	if strings.Count(e, ":") == 1 {
		h, _, _ := strings.Cut(e, ":")
		return h
	}
	return e
}

// name reports whether host (a name or an address literal) is listed.
func (a allowList) name(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, n := range a.names {
		if host == n {
			return true
		}
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// addr reports whether ip is listed.
func (a allowList) addr(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
