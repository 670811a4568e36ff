package llmtest

import (
	"net/http"
	"strings"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
)

func init() {
	codecs[OpenAIResponses] = codec{decode: responsesDecode, response: responsesResponse, stream: responsesStream, errBody: openAIError}
}

func responsesDecode(_ *http.Request, body map[string]any) (*llm.Request, bool, error) {
	req := &llm.Request{Model: str(body, "model")}
	if r := obj(body, "reasoning"); r != nil {
		req.ReasoningEffort = str(r, "effort")
	}
	for i, x := range arr(body, "tools") {
		t, _ := x.(map[string]any)
		switch str(t, "type") {
		case "web_search", "web_search_2025_08_26":
			req.WebSearch = &llm.WebSearch{AllowedDomains: strs(obj(t, "filters"), "allowed_domains")}
		case "web_search_preview":
			if obj(t, "filters") != nil {
				return nil, false, errorf("tools[%d].filters: unknown parameter for web_search_preview", i)
			}
			req.WebSearch = &llm.WebSearch{}
		}
	}
	store, hasStore := body["store"].(bool)
	stateless := hasStore && !store
	var b builder
	calls := map[string]bool{}
	answered := map[string]bool{}
	var order []string
	if s, ok := body["input"].(string); ok {
		b.add(llm.RoleUser, text(s))
	}
	for i, x := range arr(body, "input") {
		it, _ := x.(map[string]any)
		typ := str(it, "type")
		if typ == "" && str(it, "role") != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			switch str(it, "role") {
			case "assistant":
				b.add(llm.RoleAssistant, text(textOf(it["content"])))
			case "user":
				b.add(llm.RoleUser, text(textOf(it["content"])))
			case "system", "developer":
			default:
				return nil, false, errorf("input[%d].role: unexpected role %q", i, str(it, "role"))
			}
		case "reasoning":
			if stateless && str(it, "encrypted_content") == "" {
				return nil, false, errorf("Item with id '%s' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.", str(it, "id"))
			}
			var sum strings.Builder
			for _, s := range arr(it, "summary") {
				sm, _ := s.(map[string]any)
				sum.WriteString(str(sm, "text"))
			}
			b.add(llm.RoleAssistant, llm.ContentPart{Kind: llm.PartReasoning, Text: sum.String()})
		case "function_call":
			id := str(it, "call_id")
			if id == "" {
				return nil, false, errorf("input[%d].call_id: missing", i)
			}
			calls[id] = true
			order = append(order, id)
			b.add(llm.RoleAssistant, toolCall(id, str(it, "name"), []byte(str(it, "arguments"))))
		case "web_search_call":
			if str(it, "id") == "" || obj(it, "action") == nil {
				return nil, false, errorf("input[%d]: web_search_call needs its id and action", i)
			}
			ws := &llm.WebSearchCall{ID: str(it, "id")}
			action := obj(it, "action")
			if q := str(action, "query"); q != "" {
				ws.Queries = []string{q}
			}
			for _, x := range arr(action, "sources") {
				src, _ := x.(map[string]any)
				ws.Results = append(ws.Results, llm.WebSearchResult{URL: str(src, "url")})
			}
			b.add(llm.RoleAssistant, llm.ContentPart{Kind: llm.PartWebSearch, WebSearch: ws})
		case "function_call_output":
			id := str(it, "call_id")
			if !calls[id] {
				return nil, false, errorf("No tool call found for function call output with call_id %s.", id)
			}
			answered[id] = true
			b.add(llm.RoleTool, toolResult(id, jsonString(it["output"]), false))
		default:
			return nil, false, errorf("input[%d].type: unsupported item type %q", i, typ)
		}
	}
	for _, id := range order {
		if !answered[id] {
			return nil, false, errorf("No tool output found for function call %s.", id)
		}
	}
	req.Messages = b.messages()
	stream, _ := body["stream"].(bool)
	return req, stream, nil
}

// responsesItems renders resp as output items. Sources of a web search are
// included only when the request asked for them (include
// web_search_call.action.sources), as the API does.
func responsesItems(resp *llm.Response, sources bool) []map[string]any {
	var out []map[string]any
	for i, p := range resp.Message.Content {
		switch p.Kind {
		case llm.PartWebSearch:
			action := map[string]any{"type": "search", "query": ""}
			if len(p.WebSearch.Queries) > 0 {
				action["query"] = p.WebSearch.Queries[0]
			}
			if sources {
				srcs := []any{}
				for _, r := range p.WebSearch.Results {
					srcs = append(srcs, map[string]any{"type": "url", "url": r.URL})
				}
				action["sources"] = srcs
			}
			status := "completed"
			if p.WebSearch.Error != "" {
				status = "failed"
			}
			out = append(out, map[string]any{"type": "web_search_call", "id": "ws_" + p.WebSearch.ID, "status": status, "action": action})
		case llm.PartReasoning:
			out = append(out, map[string]any{"type": "reasoning", "id": "rs_" + resp.ID,
				"summary":           []any{map[string]any{"type": "summary_text", "text": p.Text}},
				"encrypted_content": "enc-" + signature(resp.ID)})
		case llm.PartText:
			out = append(out, map[string]any{"type": "message", "id": "msg_" + resp.ID, "role": "assistant", "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": p.Text, "annotations": urlCitations(p)}}})
		case llm.PartToolCall:
			_ = i
			out = append(out, map[string]any{"type": "function_call", "id": "fc_" + p.ToolCall.ID, "call_id": p.ToolCall.ID,
				"name": p.ToolCall.Name, "arguments": argsString(p.ToolCall.Arguments), "status": "completed"})
		}
	}
	return out
}

// urlCitations renders the citations of a text part as url_citation
// annotations over the span of the text each cites (the whole text when
// the cited text is not part of it).
func urlCitations(p llm.ContentPart) []any {
	out := []any{}
	runes := []rune(p.Text)
	for _, c := range p.Citations {
		start, end := 0, len(runes)
		if i := strings.Index(p.Text, c.CitedText); i >= 0 && c.CitedText != "" {
			start = len([]rune(p.Text[:i]))
			end = start + len([]rune(c.CitedText))
		}
		out = append(out, map[string]any{"type": "url_citation", "url": c.URL, "title": c.Title, "start_index": start, "end_index": end})
	}
	return out
}

func wantsSources(body map[string]any) bool {
	for _, x := range arr(body, "include") {
		if x == "web_search_call.action.sources" {
			return true
		}
	}
	return false
}

func responsesBody(resp *llm.Response, status string, output []map[string]any) map[string]any {
	u := resp.Usage
	body := map[string]any{
		"id": "resp_" + resp.ID, "object": "response", "created_at": time.Now().Unix(), "status": status,
		"model": resp.Model, "output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{},
		"usage": nil,
	}
	if status == "completed" {
		body["usage"] = map[string]any{
			"input_tokens": u.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": u.CacheReadTokens},
			"output_tokens": u.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
			"total_tokens": u.Total(),
		}
	}
	return body
}

func responsesResponse(resp *llm.Response, body map[string]any) any {
	return responsesBody(resp, "completed", responsesItems(resp, wantsSources(body)))
}

func responsesStream(w *sse, reply scripted.Reply, r *http.Request, body map[string]any) {
	resp := reply.Response
	seq := 0
	send := func(typ string, data map[string]any) {
		data["type"] = typ
		data["sequence_number"] = seq
		seq++
		w.event(typ, data)
	}
	send("response.created", map[string]any{"response": responsesBody(resp, "in_progress", []map[string]any{})})
	fail := func() bool {
		if reply.Err == nil {
			return false
		}
		code := reply.Code
		if code == "" {
			code = openAICode(reply.Err)
		}
		failed := responsesBody(resp, "failed", []map[string]any{})
		failed["error"] = map[string]any{"code": code, "message": messageFor(reply.Err)}
		send("response.failed", map[string]any{"response": failed})
		return true
	}
	items := responsesItems(resp, wantsSources(body))
	for idx, it := range items {
		switch it["type"] {
		case "web_search_call":
			send("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{"type": "web_search_call", "id": it["id"], "status": "in_progress",
				"action": map[string]any{"type": "search"}}})
			for _, phase := range []string{"in_progress", "searching", "completed"} {
				send("response.web_search_call."+phase, map[string]any{"item_id": it["id"], "output_index": idx})
			}
		case "reasoning":
			send("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{"type": "reasoning", "id": it["id"], "summary": []any{}}})
			sum := it["summary"].([]any)[0].(map[string]any)["text"].(string)
			send("response.reasoning_summary_part.added", map[string]any{"item_id": it["id"], "output_index": idx, "summary_index": 0, "part": map[string]any{"type": "summary_text", "text": ""}})
			send("response.reasoning_summary_text.delta", map[string]any{"item_id": it["id"], "output_index": idx, "summary_index": 0, "delta": sum})
			send("response.reasoning_summary_text.done", map[string]any{"item_id": it["id"], "output_index": idx, "summary_index": 0, "text": sum})
		case "message":
			send("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{"type": "message", "id": it["id"], "role": "assistant", "status": "in_progress", "content": []any{}}})
			send("response.content_part.added", map[string]any{"item_id": it["id"], "output_index": idx, "content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
			txt := it["content"].([]any)[0].(map[string]any)["text"].(string)
			for j, c := range textChunks(txt) {
				send("response.output_text.delta", map[string]any{"item_id": it["id"], "output_index": idx, "content_index": 0, "delta": c, "logprobs": []any{}})
				if j == 0 && reply.Stall {
					w.stall(r)
					return
				}
			}
			for j, a := range it["content"].([]any)[0].(map[string]any)["annotations"].([]any) {
				send("response.output_text.annotation.added", map[string]any{"item_id": it["id"], "output_index": idx, "content_index": 0,
					"annotation_index": j, "annotation": a})
			}
			send("response.output_text.done", map[string]any{"item_id": it["id"], "output_index": idx, "content_index": 0, "text": txt, "logprobs": []any{}})
			send("response.content_part.done", map[string]any{"item_id": it["id"], "output_index": idx, "content_index": 0, "part": it["content"].([]any)[0]})
		case "function_call":
			if fail() {
				return
			}
			send("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{"type": "function_call", "id": it["id"], "call_id": it["call_id"], "name": it["name"], "arguments": "", "status": "in_progress"}})
			for _, frag := range splitArgs(it["arguments"].(string)) {
				send("response.function_call_arguments.delta", map[string]any{"item_id": it["id"], "output_index": idx, "delta": frag})
			}
			send("response.function_call_arguments.done", map[string]any{"item_id": it["id"], "output_index": idx, "name": it["name"], "arguments": it["arguments"]})
		}
		send("response.output_item.done", map[string]any{"output_index": idx, "item": it})
	}
	if reply.Stall {
		w.stall(r)
		return
	}
	if fail() {
		return
	}
	send("response.completed", map[string]any{"response": responsesBody(resp, "completed", items)})
}

func openAICode(e *llm.Error) string {
	switch e.Kind {
	case llm.KindAuthentication:
		return "invalid_api_key"
	case llm.KindRateLimit:
		return "rate_limit_exceeded"
	case llm.KindContextLength:
		return "context_length_exceeded"
	case llm.KindServer:
		return "server_error"
	case llm.KindPermission:
		return "unsupported_country_region_territory"
	}
	return "invalid_request_error"
}

func openAIType(e *llm.Error) string {
	switch e.Kind {
	case llm.KindAuthentication:
		return "authentication_error"
	case llm.KindRateLimit:
		return "rate_limit_error"
	case llm.KindServer:
		return "server_error"
	}
	return "invalid_request_error"
}

func openAIError(e *llm.Error, _ int, code string) any {
	if code == "" {
		code = openAICode(e)
	}
	return map[string]any{"error": map[string]any{"message": messageFor(e), "type": openAIType(e), "param": nil, "code": code}}
}
