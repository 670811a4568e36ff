package httpx

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// Failure converts an error that is not a provider API error (transport
// failure, idle stream, cut stream) into ctx's error when ctx is done, else
// an *llm.Error. w may be nil. It returns nil when err is nil and w saw no
// failure.
func Failure(ctx context.Context, provider string, w *Watch, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if w != nil {
		if werr := w.Err(); werr != nil {
			var idle *IdleError
			switch {
			case errors.As(werr, &idle):
				return &llm.Error{Kind: llm.KindNetwork, Provider: provider, Message: idle.Error(), Err: werr}
			case errors.Is(werr, ErrTooLarge):
				return &llm.Error{Kind: llm.KindInvalidRequest, Provider: provider, Message: werr.Error(), Err: werr}
			}
			return &llm.Error{Kind: llm.KindNetwork, Provider: provider, Message: "read response: " + werr.Error(), Err: werr}
		}
	}
	if err == nil {
		return nil
	}
	var le *llm.Error
	if errors.As(err, &le) {
		return err
	}
	if IsNetwork(err) {
		return &llm.Error{Kind: llm.KindNetwork, Provider: provider, Message: err.Error(), Err: err}
	}
	return &llm.Error{Kind: llm.KindUnknown, Provider: provider, Message: err.Error(), Err: err}
}

// IsNetwork reports whether err is a connection-level failure.
func IsNetwork(err error) bool {
	var ne net.Error
	var ue *url.Error
	switch {
	case errors.As(err, &ne), errors.As(err, &ue),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe") ||
		strings.Contains(s, "server closed") || strings.Contains(s, "EOF")
}

// Incomplete is the error for a stream that ended before its final event.
func Incomplete(provider string) error {
	return &llm.Error{Kind: llm.KindNetwork, Provider: provider, Message: "stream ended before the response was complete"}
}
