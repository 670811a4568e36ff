package llm

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KindForStatus maps an HTTP status code to an ErrorKind.
func KindForStatus(code int) ErrorKind {
	switch {
	case code == http.StatusUnauthorized:
		return KindAuthentication
	case code == http.StatusForbidden:
		return KindPermission
	case code == http.StatusTooManyRequests:
		return KindRateLimit
	case code == http.StatusRequestTimeout || code == http.StatusConflict:
		return KindServer
	case code == http.StatusRequestEntityTooLarge:
		return KindContextLength
	case code >= 500:
		return KindServer
	case code >= 400:
		return KindInvalidRequest
	}
	return KindUnknown
}

// contextLengthPhrases are the messages providers use when a prompt does not
// fit the model's context window.
var contextLengthPhrases = []string{
	"context_length_exceeded",
	"context length",
	"context window",
	"prompt is too long",
	"maximum context",
	"too many tokens",
	"input token count",
	"exceeds the maximum number of tokens",
	"reduce the length",
}

// IsContextLengthMessage reports whether a provider error message or code
// says that the prompt exceeds the context window.
func IsContextLengthMessage(s string) bool {
	s = strings.ToLower(s)
	for _, p := range contextLengthPhrases {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// ParseRetryAfter reads the server-requested wait from h: retry-after-ms
// (milliseconds), else Retry-After as delay-seconds or an HTTP date
// (relative to now). It returns 0 when none is present or parsable.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
