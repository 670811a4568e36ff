// Package urlscope decides whether a credential may be sent to a URL: the
// optional annotation agent-operator.dev/allowed-base-urls of a Secret the
// operator sends somewhere (an LLM API key, MCP headers, git credentials)
// lists the URLs it may go to.
package urlscope

import (
	"net/url"
	"path"
	"strings"
	"unicode"
)

// Annotation optionally restricts where an opted-in Secret may be sent: a
// comma- or whitespace-separated list of http(s) URLs (see Allows).
const Annotation = "agent-operator.dev/allowed-base-urls"

// Allows reports whether target is under one of the URLs of list, the
// annotation's value.
func Allows(list, target string) bool {
	for _, a := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		if Under(target, a) {
			return true
		}
	}
	return false
}

// Under reports whether target has the scheme and host (with port) of
// allowed and a path equal to or below allowed's path. A target with user
// information is never under anything.
func Under(target, allowed string) bool {
	t, err := url.Parse(target)
	if err != nil || t.User != nil {
		return false
	}
	a, err := url.Parse(allowed)
	if err != nil || a.Host == "" || (a.Scheme != "http" && a.Scheme != "https") {
		return false
	}
	if !strings.EqualFold(t.Scheme, a.Scheme) || !strings.EqualFold(t.Host, a.Host) {
		return false
	}
	tp, ap := path.Clean("/"+t.Path), path.Clean("/"+a.Path)
	return ap == "/" || tp == ap || strings.HasPrefix(tp, ap+"/")
}
