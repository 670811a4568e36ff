package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/internal/httpx"
)

// mapError turns an SDK or transport error into an *llm.Error (or ctx's
// error). The SDK error is not kept: it holds the request.
func mapError(ctx context.Context, provider string, w *httpx.Watch, err error) error {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		e := &llm.Error{Provider: provider, StatusCode: apiErr.StatusCode, Code: apiErr.Code, Message: apiErr.Message}
		if e.Code == "" {
			e.Code = apiErr.Type
		}
		if e.Message == "" {
			var body struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal([]byte(apiErr.RawJSON()), &body) == nil {
				e.Message = body.Error.Message
			}
		}
		if apiErr.Response != nil {
			e.RetryAfter = llm.ParseRetryAfter(apiErr.Response.Header, time.Now())
		}
		e.Kind = kindFor(e.StatusCode, e.Code, apiErr.Type, e.Message)
		if e.Message == "" {
			e.Message = http.StatusText(e.StatusCode)
		}
		return e
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		var body struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    any    `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(se.Event.Data, &body)
		code, _ := body.Error.Code.(string)
		if code == "" {
			code = body.Error.Type
		}
		return streamError(provider, code, body.Error.Message)
	}
	return httpx.Failure(ctx, provider, w, err)
}

// streamError is an error reported inside a stream.
func streamError(provider, code, message string) error {
	kind := kindFor(0, code, "", message)
	if kind == llm.KindUnknown {
		kind = llm.KindServer
	}
	if message == "" {
		message = "stream failed"
	}
	return &llm.Error{Kind: kind, Provider: provider, Code: code, Message: message}
}

func kindFor(status int, code, typ, message string) llm.ErrorKind {
	switch code {
	case "context_length_exceeded", "string_above_max_length":
		return llm.KindContextLength
	case "rate_limit_exceeded", "insufficient_quota", "rate_limit_error":
		if code == "insufficient_quota" {
			return llm.KindPermission
		}
		return llm.KindRateLimit
	case "invalid_api_key", "authentication_error":
		return llm.KindAuthentication
	case "server_error", "server_is_overloaded", "overloaded", "internal_error":
		return llm.KindServer
	}
	if typ == "server_error" {
		return llm.KindServer
	}
	kind := llm.KindForStatus(status)
	if (kind == llm.KindInvalidRequest || kind == llm.KindUnknown) && llm.IsContextLengthMessage(code+" "+message) {
		return llm.KindContextLength
	}
	return kind
}
