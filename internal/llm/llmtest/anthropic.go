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
	for i, x := range arr(body, "tools") {
		t, _ := x.(map[string]any)
		if str(t, "type") != "web_search_20250305" {
			continue
		}
		if str(t, "name") != "web_search" {
			return nil, false, errorf("tools.%d.name: web_search_20250305 must be named web_search", i)
		}
		ws := &llm.WebSearch{MaxUses: int(num(t, "max_uses")), AllowedDomains: strs(t, "allowed_domains"), BlockedDomains: strs(t, "blocked_domains")}
		if len(ws.AllowedDomains) > 0 && len(ws.BlockedDomains) > 0 {
			return nil, false, errorf("tools.%d: Cannot specify both allowed_domains and blocked_domains", i)
		}
		if _, set := t["max_uses"]; set && ws.MaxUses <= 0 {
			return nil, false, errorf("tools.%d.max_uses: must be greater than 0", i)
		}
		req.WebSearch = ws
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
			searches := map[string]*llm.WebSearchCall{} // server_tool_use ids waiting for their result
			for j, y := range blocks {
				blk, _ := y.(map[string]any)
				switch str(blk, "type") {
				case "server_tool_use":
					ws := &llm.WebSearchCall{ID: str(blk, "id")}
					if q := str(obj(blk, "input"), "query"); q != "" {
						ws.Queries = []string{q}
					}
					searches[ws.ID] = ws
				case "web_search_tool_result":
					ws := searches[str(blk, "tool_use_id")]
					if ws == nil {
						return nil, false, errorf("messages.%d.content.%d: web_search_tool_result block(s) provided when previous message does not have a matching server_tool_use block with id %s", i, j, str(blk, "tool_use_id"))
					}
					delete(searches, ws.ID)
					if c := obj(blk, "content"); c != nil {
						ws.Error = str(c, "error_code")
					}
					for _, r := range arr(blk, "content") {
						rm, _ := r.(map[string]any)
						if str(rm, "encrypted_content") == "" {
							return nil, false, errorf("messages.%d.content.%d: web_search_result without its encrypted_content", i, j)
						}
						ws.Results = append(ws.Results, llm.WebSearchResult{URL: str(rm, "url"), Title: str(rm, "title")})
					}
					b.add(llm.RoleAssistant, llm.ContentPart{Kind: llm.PartWebSearch, WebSearch: ws})
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
			for id := range searches {
				return nil, false, errorf("messages.%d: server_tool_use ids were found without web_search_tool_result blocks immediately after: %s", i, id)
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
	switch resp.FinishReason {
	case llm.FinishToolCalls:
		return "tool_use"
	case llm.FinishOther:
		return "pause_turn"
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
		case llm.PartWebSearch:
			out = append(out, anthropicSearchBlocks(p.WebSearch)...)
		case llm.PartText:
			blk := map[string]any{"type": "text", "text": p.Text}
			if len(p.Citations) > 0 {
				var cs []any
				for _, c := range p.Citations {
					cs = append(cs, map[string]any{"type": "web_search_result_location", "url": c.URL, "title": c.Title,
						"cited_text": c.CitedText, "encrypted_index": signature(c.URL)})
				}
				blk["citations"] = cs
			}
			out = append(out, blk)
		case llm.PartToolCall:
			out = append(out, map[string]any{"type": "tool_use", "id": p.ToolCall.ID, "name": p.ToolCall.Name, "input": argsObject(p.ToolCall.Arguments)})
		}
	}
	return out
}

// anthropicSearchBlocks renders a web search as the API does: a
// server_tool_use block, then its web_search_tool_result block.
func anthropicSearchBlocks(ws *llm.WebSearchCall) []map[string]any {
	query := ""
	if len(ws.Queries) > 0 {
		query = ws.Queries[0]
	}
	var content any = map[string]any{"type": "web_search_tool_result_error", "error_code": ws.Error}
	if ws.Error == "" {
		results := []any{}
		for _, r := range ws.Results {
			results = append(results, map[string]any{"type": "web_search_result", "url": r.URL, "title": r.Title,
				"encrypted_content": signature(r.URL), "page_age": "April 30, 2025"})
		}
		content = results
	}
	return []map[string]any{
		{"type": "server_tool_use", "id": ws.ID, "name": "web_search", "input": map[string]any{"query": query}},
		{"type": "web_search_tool_result", "tool_use_id": ws.ID, "content": content},
	}
}

func anthropicSearchCount(resp *llm.Response) int {
	n := 0
	for _, p := range resp.Message.Content {
		if p.Kind == llm.PartWebSearch {
			n++
		}
	}
	return n
}

func anthropicResponse(resp *llm.Response, _ map[string]any) any {
	usage := anthropicUsage(resp.Usage)
	if n := anthropicSearchCount(resp); n > 0 {
		usage["server_tool_use"] = map[string]any{"web_search_requests": n}
	}
	return map[string]any{
		"id": "msg_" + resp.ID, "type": "message", "role": "assistant", "model": resp.Model,
		"content": anthropicBlocks(resp), "stop_reason": anthropicStop(resp), "stop_sequence": nil,
		"usage": usage,
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
		case "server_tool_use":
			w.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "server_tool_use", "id": blk["id"], "name": blk["name"], "input": map[string]any{}}})
			args, _ := json.Marshal(blk["input"])
			delta(map[string]any{"type": "input_json_delta", "partial_json": ""})
			for _, frag := range splitArgs(string(args)) {
				delta(map[string]any{"type": "input_json_delta", "partial_json": frag})
			}
		case "web_search_tool_result":
			// The results arrive whole in the block's start event.
			w.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": blk})
		case "text":
			start := map[string]any{"type": "text", "text": ""}
			cs, cited := blk["citations"].([]any)
			if cited {
				start["citations"] = []any{}
			}
			w.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start})
			for _, c := range cs {
				delta(map[string]any{"type": "citations_delta", "citation": c})
			}
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
	if n := anthropicSearchCount(resp); n > 0 {
		finalUsage["server_tool_use"] = map[string]any{"web_search_requests": n}
	}
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
