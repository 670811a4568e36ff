package llmtest

import (
	"net/http"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
)

func init() {
	codecs[ChatCompletions] = codec{decode: chatDecode, response: chatResponse, stream: chatStream, errBody: openAIError}
}

func chatDecode(_ *http.Request, body map[string]any) (*llm.Request, bool, error) {
	req := &llm.Request{Model: str(body, "model"), ReasoningEffort: str(body, "reasoning_effort")}
	var b builder
	var pending []string
	answered := map[string]bool{}
	checkAnswered := func(i int) error {
		for _, id := range pending {
			if !answered[id] {
				return errorf("messages.[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", i, id)
			}
		}
		pending = nil
		return nil
	}
	for i, x := range arr(body, "messages") {
		m, _ := x.(map[string]any)
		role := str(m, "role")
		if role != "tool" {
			if err := checkAnswered(i); err != nil {
				return nil, false, err
			}
		}
		switch role {
		case "system", "developer":
		case "user":
			b.cut()
			b.add(llm.RoleUser, text(textOf(m["content"])))
		case "assistant":
			b.cut()
			if t := textOf(m["content"]); t != "" {
				b.add(llm.RoleAssistant, text(t))
			}
			for _, y := range arr(m, "tool_calls") {
				tc, _ := y.(map[string]any)
				id := str(tc, "id")
				if id == "" {
					return nil, false, errorf("messages.[%d].tool_calls: id is required", i)
				}
				fn := obj(tc, "function")
				pending = append(pending, id)
				b.add(llm.RoleAssistant, toolCall(id, str(fn, "name"), []byte(str(fn, "arguments"))))
			}
		case "tool":
			id := str(m, "tool_call_id")
			found := false
			for _, p := range pending {
				found = found || p == id
			}
			if !found {
				return nil, false, errorf("messages.[%d]: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (unknown tool_call_id %q)", i, id)
			}
			answered[id] = true
			b.add(llm.RoleTool, toolResult(id, textOf(m["content"]), false))
		default:
			return nil, false, errorf("messages.[%d].role: unexpected role %q", i, role)
		}
	}
	if err := checkAnswered(len(arr(body, "messages"))); err != nil {
		return nil, false, err
	}
	req.Messages = b.messages()
	stream, _ := body["stream"].(bool)
	return req, stream, nil
}

func chatUsage(u llm.Usage) map[string]any {
	return map[string]any{"prompt_tokens": u.InputTokens, "completion_tokens": u.OutputTokens, "total_tokens": u.Total(),
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.CacheReadTokens},
		"completion_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens}}
}

func chatFinish(resp *llm.Response) string {
	if resp.FinishReason == llm.FinishToolCalls {
		return "tool_calls"
	}
	return "stop"
}

func chatResponse(resp *llm.Response, _ map[string]any) any {
	msg := map[string]any{"role": "assistant", "content": nil}
	if t := resp.Message.Text(); t != "" {
		msg["content"] = t
	}
	if r := resp.Message.Reasoning(); r != "" {
		msg["reasoning_content"] = r
	}
	var calls []any
	for _, tc := range resp.Message.ToolCalls() {
		call := map[string]any{"type": "function",
			"function": map[string]any{"name": tc.Name, "arguments": argsString(tc.Arguments)}}
		if tc.ID != "" {
			call["id"] = tc.ID
		}
		calls = append(calls, call)
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	return map[string]any{"id": "chatcmpl-" + resp.ID, "object": "chat.completion", "created": time.Now().Unix(), "model": resp.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": chatFinish(resp)}},
		"usage":   chatUsage(resp.Usage)}
}

func chatStream(w *sse, reply scripted.Reply, r *http.Request, body map[string]any) {
	resp := reply.Response
	chunk := func(delta map[string]any, finish any) {
		w.event("", map[string]any{"id": "chatcmpl-" + resp.ID, "object": "chat.completion.chunk", "created": time.Now().Unix(),
			"model": resp.Model, "choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
	}
	fail := func() bool {
		if reply.Err == nil {
			return false
		}
		w.event("", openAIError(reply.Err, statusFor(reply.Err), reply.Code))
		return true
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	if rs := resp.Message.Reasoning(); rs != "" {
		chunk(map[string]any{"reasoning_content": rs}, nil)
	}
	for j, c := range textChunks(resp.Message.Text()) {
		if c == "" {
			continue
		}
		chunk(map[string]any{"content": c}, nil)
		if j == 0 && reply.Stall {
			w.stall(r)
			return
		}
	}
	if fail() {
		return
	}
	for i, tc := range resp.Message.ToolCalls() {
		first := map[string]any{"index": i, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": ""}}
		if tc.ID != "" {
			first["id"] = tc.ID
		}
		chunk(map[string]any{"tool_calls": []any{first}}, nil)
		for _, frag := range splitArgs(argsString(tc.Arguments)) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": frag}}}}, nil)
		}
	}
	if reply.Stall {
		w.stall(r)
		return
	}
	chunk(map[string]any{}, chatFinish(resp))
	if so := obj(body, "stream_options"); so != nil && so["include_usage"] == true {
		w.event("", map[string]any{"id": "chatcmpl-" + resp.ID, "object": "chat.completion.chunk", "created": time.Now().Unix(),
			"model": resp.Model, "choices": []any{}, "usage": chatUsage(resp.Usage)})
	}
	w.raw("", "[DONE]")
}
