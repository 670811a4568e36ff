package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
)

func init() {
	codecs[Gemini] = codec{decode: geminiDecode, response: geminiResponse, stream: geminiStream, errBody: geminiError}
}

func geminiDecode(r *http.Request, body map[string]any) (*llm.Request, bool, error) {
	model := r.URL.Path[strings.Index(r.URL.Path, "/models/")+len("/models/"):]
	model, _, _ = strings.Cut(model, ":")
	req := &llm.Request{Model: model}
	if gc := obj(body, "generationConfig"); gc != nil {
		if tc := obj(gc, "thinkingConfig"); tc != nil {
			_, hasBudget := tc["thinkingBudget"]
			if level := str(tc, "thinkingLevel"); level != "" {
				if hasBudget {
					return nil, false, errorf("You can only set only one of thinking budget and thinking level.")
				}
				req.ReasoningEffort = strings.ToLower(level)
			} else if hasBudget {
				req.ReasoningEffort = effortFromBudget(num(tc, "thinkingBudget"), 1024, 8192)
			}
		}
	}
	for i, x := range arr(body, "tools") {
		t, _ := x.(map[string]any)
		if gs, ok := t["googleSearch"]; ok {
			g, _ := gs.(map[string]any)
			if _, ok := g["excludeDomains"]; ok {
				return nil, false, errorf("tools[%d].googleSearch: excludeDomains parameter is not supported in Gemini API.", i)
			}
			req.WebSearch = &llm.WebSearch{}
		}
	}
	var b builder
	pendingCalls := 0
	for i, x := range arr(body, "contents") {
		c, _ := x.(map[string]any)
		parts := arr(c, "parts")
		switch str(c, "role") {
		case "model":
			if pendingCalls > 0 {
				return nil, false, errorf("contents[%d]: function call turn must be followed by a user turn with %d function responses", i, pendingCalls)
			}
			b.cut()
			firstCall := true
			for _, y := range parts {
				p, _ := y.(map[string]any)
				switch {
				case p["functionCall"] != nil:
					if firstCall && str(p, "thoughtSignature") == "" && !strings.HasPrefix(model, "gemini-1") && !strings.HasPrefix(model, "gemini-2") {
						return nil, false, errorf("Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. (contents[%d])", i)
					}
					firstCall = false
					fc := obj(p, "functionCall")
					args, _ := json.Marshal(fc["args"])
					pendingCalls++
					b.add(llm.RoleAssistant, toolCall(str(fc, "id"), str(fc, "name"), args))
				case p["thought"] == true:
					b.add(llm.RoleAssistant, llm.ContentPart{Kind: llm.PartReasoning, Text: str(p, "text")})
				case p["text"] != nil:
					b.add(llm.RoleAssistant, text(str(p, "text")))
				}
			}
		case "user", "":
			b.cut()
			responses := 0
			for _, y := range parts {
				p, _ := y.(map[string]any)
				switch {
				case p["functionResponse"] != nil:
					fr := obj(p, "functionResponse")
					resp := obj(fr, "response")
					if resp == nil {
						return nil, false, errorf("contents[%d]: functionResponse.response must be an object", i)
					}
					responses++
					content, isErr := resp["output"], false
					if e, ok := resp["error"]; ok {
						content, isErr = e, true
					}
					b.add(llm.RoleTool, toolResult(str(fr, "id"), jsonString(content), isErr))
				case p["text"] != nil:
					b.add(llm.RoleUser, text(str(p, "text")))
				}
			}
			if responses != pendingCalls {
				return nil, false, errorf("contents[%d]: please ensure that the number of function response parts is equal to the number of function call parts of the function call turn (%d responses, %d calls)", i, responses, pendingCalls)
			}
			pendingCalls = 0
		default:
			return nil, false, errorf("contents[%d].role: unexpected role %q", i, str(c, "role"))
		}
	}
	if pendingCalls > 0 {
		return nil, false, errorf("function call turn must be followed by a user turn with %d function responses", pendingCalls)
	}
	req.Messages = b.messages()
	return req, strings.HasSuffix(r.URL.Path, ":streamGenerateContent"), nil
}

func geminiParts(resp *llm.Response) []map[string]any {
	var out []map[string]any
	first := true
	for _, p := range resp.Message.Content {
		switch p.Kind {
		case llm.PartReasoning:
			out = append(out, map[string]any{"text": p.Text, "thought": true})
		case llm.PartText:
			out = append(out, map[string]any{"text": p.Text})
		case llm.PartToolCall:
			fc := map[string]any{"name": p.ToolCall.Name, "args": argsObject(p.ToolCall.Arguments)}
			if p.ToolCall.ID != "" {
				fc["id"] = p.ToolCall.ID
			}
			part := map[string]any{"functionCall": fc}
			if first {
				part["thoughtSignature"] = signature(resp.ID)
				first = false
			}
			out = append(out, part)
		}
	}
	return out
}

func geminiUsage(u llm.Usage) map[string]any {
	return map[string]any{"promptTokenCount": u.InputTokens, "cachedContentTokenCount": u.CacheReadTokens,
		"candidatesTokenCount": u.OutputTokens - u.ReasoningTokens, "thoughtsTokenCount": u.ReasoningTokens,
		"totalTokenCount": u.Total()}
}

func geminiChunk(resp *llm.Response, parts []map[string]any, last bool) map[string]any {
	cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
	out := map[string]any{"candidates": []any{cand}, "modelVersion": resp.Model, "responseId": "gem-" + resp.ID}
	if last {
		cand["finishReason"] = "STOP"
		out["usageMetadata"] = geminiUsage(resp.Usage)
		if g := geminiGrounding(resp); g != nil {
			cand["groundingMetadata"] = g // with the final chunk, as the API sends it
		}
	}
	return out
}

// geminiGrounding renders the web search of resp as Google Search
// grounding: the queries, the sources as grounding chunks, and each
// citation as a grounding support over the span of the answer it cites
// (byte offsets into the whole answer text).
func geminiGrounding(resp *llm.Response) map[string]any {
	var ws *llm.WebSearchCall
	var answer string
	var cites []llm.Citation
	for _, p := range resp.Message.Content {
		switch p.Kind {
		case llm.PartWebSearch:
			ws = p.WebSearch
		case llm.PartText:
			answer += p.Text
			cites = append(cites, p.Citations...)
		}
	}
	if ws == nil {
		return nil
	}
	chunks := []any{}
	index := map[string]int{}
	addChunk := func(url, title string) int {
		if i, ok := index[url]; ok {
			return i
		}
		index[url] = len(chunks)
		chunks = append(chunks, map[string]any{"web": map[string]any{"uri": url, "title": title}})
		return index[url]
	}
	for _, r := range ws.Results {
		addChunk(r.URL, r.Title)
	}
	supports := []any{}
	for _, c := range cites {
		start := strings.Index(answer, c.CitedText)
		seg := map[string]any{"endIndex": len(answer), "text": answer}
		if start >= 0 && c.CitedText != "" {
			seg = map[string]any{"endIndex": start + len(c.CitedText), "text": c.CitedText}
			if start > 0 {
				seg["startIndex"] = start
			}
		}
		supports = append(supports, map[string]any{"segment": seg, "groundingChunkIndices": []int{addChunk(c.URL, c.Title)}})
	}
	return map[string]any{
		"webSearchQueries":  ws.Queries,
		"searchEntryPoint":  map[string]any{"renderedContent": "<style>.container{}</style><div class=\"container\">Google</div>"},
		"groundingChunks":   chunks,
		"groundingSupports": supports,
	}
}

func geminiResponse(resp *llm.Response, _ map[string]any) any {
	return geminiChunk(resp, geminiParts(resp), true)
}

func geminiStream(w *sse, reply scripted.Reply, r *http.Request, _ map[string]any) {
	resp := reply.Response
	var tail []map[string]any
	for _, p := range geminiParts(resp) {
		if t, ok := p["text"].(string); ok && p["thought"] == nil {
			for j, c := range textChunks(t) {
				w.event("", geminiChunk(resp, []map[string]any{{"text": c}}, false))
				if j == 0 && reply.Stall {
					w.stall(r)
					return
				}
			}
			continue
		}
		if p["functionCall"] != nil {
			tail = append(tail, p)
			continue
		}
		w.event("", geminiChunk(resp, []map[string]any{p}, false))
	}
	if reply.Stall {
		w.stall(r)
		return
	}
	if reply.Err != nil {
		w.event("", geminiError(reply.Err, statusFor(reply.Err), reply.Code))
		return
	}
	if tail == nil {
		tail = []map[string]any{}
	}
	w.event("", geminiChunk(resp, tail, true))
}

func geminiStatus(e *llm.Error, status int) string {
	switch {
	case e.Kind == llm.KindAuthentication:
		return "UNAUTHENTICATED"
	case e.Kind == llm.KindPermission:
		return "PERMISSION_DENIED"
	case e.Kind == llm.KindRateLimit:
		return "RESOURCE_EXHAUSTED"
	case status == http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case status >= 500:
		return "INTERNAL"
	case status == http.StatusNotFound:
		return "NOT_FOUND"
	}
	return "INVALID_ARGUMENT"
}

func geminiError(e *llm.Error, status int, code string) any {
	if code == "" {
		code = geminiStatus(e, status)
	}
	msg := messageFor(e)
	if e.Kind == llm.KindContextLength && e.Message == "" {
		msg = "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
	}
	body := map[string]any{"code": status, "message": msg, "status": code}
	if e.RetryAfter > 0 {
		body["details"] = []any{map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo",
			"retryDelay": fmt.Sprintf("%.3fs", e.RetryAfter.Seconds())}}
	}
	return map[string]any{"error": body}
}
