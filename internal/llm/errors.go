package llm

import (
	"errors"
	"fmt"
	"time"
)

// ErrorKind classifies provider failures the way seed 000's error table needs.
type ErrorKind string

// Error kinds.
const (
	KindAuthentication ErrorKind = "authentication"  // 401: close the session, never retry
	KindPermission     ErrorKind = "permission"      // 403
	KindRateLimit      ErrorKind = "rate_limit"      // 429: retryable
	KindServer         ErrorKind = "server"          // 5xx, overloaded: retryable
	KindContextLength  ErrorKind = "context_length"  // prompt too long: warn and close
	KindNetwork        ErrorKind = "network"         // connection failures, idle stream: retryable
	KindInvalidRequest ErrorKind = "invalid_request" // 400/404/422: never retry
	KindUnknown        ErrorKind = "unknown"
)

// Error is a provider failure normalised across adapters. It never holds
// request dumps or headers, so it is safe to log.
type Error struct {
	Kind       ErrorKind
	Provider   string
	StatusCode int
	Code       string // provider error type/code, e.g. "rate_limit_error"
	Message    string
	RetryAfter time.Duration // from Retry-After / retry-after-ms / retryDelay, 0 if absent
	Err        error         // underlying error, if any
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s error", e.Provider, e.Kind)
	if e.StatusCode != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.StatusCode)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether another attempt may succeed.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case KindRateLimit, KindServer, KindNetwork:
		return true
	}
	return false
}

// KindOf returns the ErrorKind of err, or KindUnknown if err is not an *Error.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindUnknown
}
