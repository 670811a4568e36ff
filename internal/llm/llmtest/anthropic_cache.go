package llmtest

import "strconv"

// MaxCacheBreakpoints is the most blocks with cache_control the Anthropic
// Messages API accepts in one request.
const MaxCacheBreakpoints = 4

// cacheMark is one cache_control found in an Anthropic request body.
type cacheMark struct {
	path    string // e.g. "messages.2.content.1"
	typ     string // the block's type ("text", "tool_result", …; "" for a tool)
	text    string // the block's text, for text blocks
	control any    // the cache_control value
}

// anthropicCacheMarks walks an Anthropic Messages request body in prompt
// order (tools, system, messages) and returns every cache_control it sets,
// including those on blocks inside tool_result content.
func anthropicCacheMarks(body map[string]any) []cacheMark {
	var out []cacheMark
	visit := func(path string, v any) {
		blk, _ := v.(map[string]any)
		if cc, ok := blk["cache_control"]; ok && cc != nil {
			out = append(out, cacheMark{path: path, typ: str(blk, "type"), text: str(blk, "text"), control: cc})
		}
	}
	for i, t := range arr(body, "tools") {
		visit("tools."+strconv.Itoa(i), t)
	}
	for i, b := range arr(body, "system") { // system may also be a plain string
		visit("system."+strconv.Itoa(i), b)
	}
	for i, m := range arr(body, "messages") {
		msg, _ := m.(map[string]any)
		for j, b := range arr(msg, "content") { // content may also be a plain string
			path := "messages." + strconv.Itoa(i) + ".content." + strconv.Itoa(j)
			visit(path, b)
			blk, _ := b.(map[string]any)
			if str(blk, "type") == "tool_result" {
				for k, c := range arr(blk, "content") {
					visit(path+".content."+strconv.Itoa(k), c)
				}
			}
		}
	}
	return out
}

// CacheBreakpoints lists where an Anthropic Messages request body sets
// cache_control, as dotted paths into the body in prompt order: "tools.1",
// "system.0", "messages.2.content.1", and "messages.2.content.0.content.0"
// for a block inside a tool_result.
func CacheBreakpoints(body map[string]any) []string {
	var out []string
	for _, m := range anthropicCacheMarks(body) {
		out = append(out, m.path)
	}
	return out
}

// checkAnthropicCache rejects what the Messages API rejects about
// cache_control: more than MaxCacheBreakpoints, a type other than
// ephemeral, an unknown ttl, and breakpoints on thinking blocks or empty
// text blocks.
func checkAnthropicCache(body map[string]any) error {
	marks := anthropicCacheMarks(body)
	for _, m := range marks {
		cc, _ := m.control.(map[string]any)
		if str(cc, "type") != "ephemeral" {
			return errorf("%s.cache_control.type: Input should be 'ephemeral'", m.path)
		}
		if ttl, ok := cc["ttl"]; ok && ttl != "5m" && ttl != "1h" {
			return errorf("%s.cache_control.ttl: Input should be '5m' or '1h'", m.path)
		}
		switch m.typ {
		case "thinking", "redacted_thinking":
			return errorf("%s.%s.cache_control: Extra inputs are not permitted", m.path, m.typ)
		case "text":
			if m.text == "" {
				return errorf("%s.text: cache_control cannot be set for empty text blocks", m.path)
			}
		}
	}
	if len(marks) > MaxCacheBreakpoints {
		return errorf("A maximum of %d blocks with cache_control may be provided. Found %d.", MaxCacheBreakpoints, len(marks))
	}
	return nil
}
