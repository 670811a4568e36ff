// Package webfetch fetches one URL over HTTP(S) for the web_fetch tool and
// turns the response into text: HTML becomes Markdown-like text (headings,
// paragraphs, lists, links, code blocks, tables; scripts, styles and other
// non-content elements dropped), other textual types pass through, binary
// types are refused.
//
// Every fetch is bounded: the body is read through a limit (MaxBytes, the
// rest is never read), the whole fetch (redirects and body included) through
// a timeout, and redirects through a count. Every connection, the first and
// each redirect's, is checked when it is dialled, on the address actually
// dialled: loopback, private, link-local, unspecified, multicast and
// shared (100.64.0.0/10) addresses are refused unless the request allows
// private addresses or lists the host (by name, address or CIDR) in
// AllowHosts. Environment proxies are not used, so the check always sees
// the real destination.
package webfetch
