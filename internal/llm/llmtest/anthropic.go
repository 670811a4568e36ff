package llmtest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
)

func init() {
	codecs[Anthropic] = codec{decode: anthropicDecode, response: anthropicResponse, stream: anthropicStream, errBody: anthropicError}
}

func anthropicDecode(_ *http.Request, body map[string]any) (*llm.Request, bool, error) {
	req := &llm.Request{Model: str(body, "model")}
	if err := checkAnthropicCache(body); err != nil {
		return nil, false, err
	}
	if th := obj(body, "thinking"); th != nil {
		switch str(th, "type") {
		case "enabled":
			req.ReasoningEffort = effortFromBudget(num(th, "budget_tokens"), 2048, 8192)
			if b, max := num(th, "budget_tokens"), num(body, "max_tokens"); b < 1024 || b >= max {
				return nil, false, errorf("thinking.budget_tokens: must be ≥ 1024 and less than max_tokens (got %v, max_tokens %v)", b, max)
			}
		case "adaptive":
			req.ReasoningEffort = "adaptive"
		}
	}
	if oc := obj(body, "output_config"); oc != nil && str(oc, "effort") != "" {
		req.ReasoningEffort = str(oc, "effort")
	}
	var b builder
	var pending []string // tool_use ids the next user message must answer first
	for i, x := range arr(body, "messages") {
		m, _ := x.(map[string]any)
		role := str(m, "role")
		var blocks []any
		if s, ok := m["content"].(string); ok {
			blocks = []any{map[string]any{"type": "text", "text": s}}
		} else {
			blocks = arr(m, "content")
		}
		switch role {
		case "user":
			answered := map[string]bool{}
			leading := true
			b.cut()
			for _, y := range blocks {
				blk, _ := y.(map[string]any)
				if str(blk, "type") == "tool_result" {
					if !leading {
						return nil, false, errorf("messages.%d: tool_result blocks must come first in the user message, before any other content", i)
					}
					id := str(blk, "tool_use_id")
					answered[id] = true
					isErr, _ := blk["is_error"].(bool)
					b.add(llm.RoleTool, toolResult(id, textOf(blk["content"]), isErr))
					continue
				}
				leading = false
				if str(blk, "type") == "text" {
					b.add(llm.RoleUser, text(str(blk, "text")))
				}
			}
			var missing []string
			for _, id := range pending {
				if !answered[id] {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return nil, false, errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
			}
			pending = nil
		case "assistant":
			if len(pending) > 0 {
				return nil, false, errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i-1, strings.Join(pending, ", "))
			}
			b.cut()
			for _, y := range blocks {
				blk, _ := y.(map[string]any)
				switch str(blk, "type") {
				case "text":
					b.add(llm.RoleAssistant, text(str(blk, "text")))
				case "thinking":
					if str(blk, "signature") == "" {
						return nil, false, errorf("messages.%d: thinking block without its signature", i)
					}
					b.add(llm.RoleAssistant, llm.ContentPart{Kind: llm.PartReasoning, Text: str(blk, "thinking")})
				case "redacted_thinking":
					b.add(llm.RoleAssistant, llm.ContentPart{Kind: llm.PartReasoning})
				case "tool_use":
					id := str(blk, "id")
					pending = append(pending, id)
					args, _ := json.Marshal(blk["input"])
					b.add(llm.RoleAssistant, toolCall(id, str(blk, "name"), args))
				}
			}
		default:
			return nil, false, errorf("messages.%d.role: unexpected role %q", i, role)
		}
	}
	req.Messages = b.messages()
	stream, _ := body["stream"].(bool)
	return req, stream, nil
}

func anthropicUsage(u llm.Usage) map[string]any {
	return map[string]any{
		"input_tokens":                u.InputTokens - u.CacheReadTokens - u.CacheWriteTokens,
		"cache_read_input_tokens":     u.CacheReadTokens,
		"cache_creation_input_tokens": u.CacheWriteTokens,
		"cache_creation":              map[string]any{"ephemeral_5m_input_tokens": u.CacheWriteTokens, "ephemeral_1h_input_tokens": 0},
		"output_tokens":               u.OutputTokens,
	}
}

func anthropicStop(resp *llm.Response) string {
	if resp.FinishReason == llm.FinishToolCalls {
		return "tool_use"
	}
	return "end_turn"
}

func signature(id string) string {
	return base64.StdEncoding.EncodeToString([]byte("sig-" + id))
}

func anthropicBlocks(resp *llm.Response) []map[string]any {
	var out []map[string]any
	for _, p := range resp.Message.Content {
		switch p.Kind {
		case llm.PartReasoning:
			out = append(out, map[string]any{"type": "thinking", "thinking": p.Text, "signature": signature(resp.ID)})
		case llm.PartText:
			out = append(out, map[string]any{"type": "text", "text": p.Text})
		case llm.PartToolCall:
			out = append(out, map[string]any{"type": "tool_use", "id": p.ToolCall.ID, "name": p.ToolCall.Name, "input": argsObject(p.ToolCall.Arguments)})
		}
	}
	return out
}

func anthropicResponse(resp *llm.Response) any {
	return map[string]any{
		"id": "msg_" + resp.ID, "type": "message", "role": "assistant", "model": resp.Model,
		"content": anthropicBlocks(resp), "stop_reason": anthropicStop(resp), "stop_sequence": nil,
		"usage": anthropicUsage(resp.Usage),
	}
}

func anthropicStream(w *sse, reply scripted.Reply, r *http.Request, _ map[string]any) {
	resp := reply.Response
	startUsage := anthropicUsage(resp.Usage)
	startUsage["output_tokens"] = 1
	w.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_" + resp.ID, "type": "message", "role": "assistant", "model": resp.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": startUsage}})
	w.event("ping", map[string]any{"type": "ping"})
	failed := func() bool {
		if reply.Err == nil {
			return false
		}
		code := reply.Code
		if code == "" {
			code = anthropicCode(reply.Err, statusFor(reply.Err))
		}
		w.event("error", map[string]any{"type": "error", "error": map[string]any{"type": code, "message": messageFor(reply.Err)}})
		return true
	}
	for i, blk := range anthropicBlocks(resp) {
		delta := func(d map[string]any) {
			w.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d})
		}
		switch blk["type"] {
		case "thinking":
			w.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
			delta(map[string]any{"type": "thinking_delta", "thinking": blk["thinking"]})
			delta(map[string]any{"type": "signature_delta", "signature": blk["signature"]})
		case "text":
			w.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			for j, c := range textChunks(blk["text"].(string)) {
				delta(map[string]any{"type": "text_delta", "text": c})
				if j == 0 && reply.Stall {
					w.stall(r)
					return
				}
			}
		case "tool_use":
			if failed() {
				return
			}
			w.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": blk["id"], "name": blk["name"], "input": map[string]any{}}})
			args, _ := json.Marshal(blk["input"])
			delta(map[string]any{"type": "input_json_delta", "partial_json": ""})
			for _, frag := range splitArgs(string(args)) {
				delta(map[string]any{"type": "input_json_delta", "partial_json": frag})
			}
		}
		w.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	if reply.Stall {
		w.stall(r)
		return
	}
	if failed() {
		return
	}
	// Like the API, message_delta repeats the cumulative input and cache
	// counts next to the final output count.
	finalUsage := anthropicUsage(resp.Usage)
	delete(finalUsage, "cache_creation")
	w.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": anthropicStop(resp), "stop_sequence": nil},
		"usage": finalUsage})
	w.event("message_stop", map[string]any{"type": "message_stop"})
}

func anthropicCode(e *llm.Error, status int) string {
	switch {
	case e.Kind == llm.KindAuthentication:
		return "authentication_error"
	case e.Kind == llm.KindPermission:
		return "permission_error"
	case e.Kind == llm.KindRateLimit:
		return "rate_limit_error"
	case status == 529:
		return "overloaded_error"
	case e.Kind == llm.KindServer, status >= 500:
		return "api_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	}
	return "invalid_request_error"
}

func anthropicError(e *llm.Error, status int, code string) any {
	if code == "" {
		code = anthropicCode(e, status)
	}
	return map[string]any{"type": "error", "error": map[string]any{"type": code, "message": messageFor(e)},
		"request_id": fmt.Sprintf("req_llmtest_%d", status)}
}
