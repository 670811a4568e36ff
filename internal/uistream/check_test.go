package uistream

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// chunkKeys are the keys the AI SDK's strict chunk schema allows per type
// (ai, ui-message-stream/ui-message-chunks.ts) among those this package
// writes, and which of them are required.
var chunkKeys = map[string]struct{ required, optional []string }{
	TypeStart:               {[]string{"type"}, []string{"messageId", "messageMetadata"}},
	TypeFinish:              {[]string{"type"}, []string{"finishReason", "messageMetadata"}},
	TypeStartStep:           {[]string{"type"}, nil},
	TypeFinishStep:          {[]string{"type"}, nil},
	TypeTextStart:           {[]string{"type", "id"}, []string{"providerMetadata"}},
	TypeTextDelta:           {[]string{"type", "id", "delta"}, []string{"providerMetadata"}},
	TypeTextEnd:             {[]string{"type", "id"}, []string{"providerMetadata"}},
	TypeReasoningStart:      {[]string{"type", "id"}, []string{"providerMetadata"}},
	TypeReasoningDelta:      {[]string{"type", "id", "delta"}, []string{"providerMetadata"}},
	TypeReasoningEnd:        {[]string{"type", "id"}, []string{"providerMetadata"}},
	TypeToolInputStart:      {[]string{"type", "toolCallId", "toolName"}, []string{"providerExecuted", "providerMetadata", "dynamic", "title"}},
	TypeToolInputAvailable:  {[]string{"type", "toolCallId", "toolName", "input"}, []string{"providerExecuted", "providerMetadata", "dynamic", "title"}},
	TypeToolOutputAvailable: {[]string{"type", "toolCallId", "output"}, []string{"providerExecuted", "dynamic", "preliminary"}},
	TypeToolOutputError:     {[]string{"type", "toolCallId", "errorText"}, []string{"providerExecuted", "dynamic"}},
	TypeSourceURL:           {[]string{"type", "sourceId", "url"}, []string{"title", "providerMetadata"}},
	TypeError:               {[]string{"type", "errorText"}, nil},
	"data-":                 {[]string{"type", "data"}, []string{"id", "transient"}},
}

// checkSchema checks that the JSON of c has the keys of its type only.
func checkSchema(c Chunk) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	var typ string
	if err := json.Unmarshal(m["type"], &typ); err != nil {
		return fmt.Errorf("%s: type: %w", b, err)
	}
	key := typ
	if IsData(typ) {
		key = "data-"
	}
	keys, ok := chunkKeys[key]
	if !ok {
		return fmt.Errorf("%s: unknown chunk type", b)
	}
	for _, k := range keys.required {
		if _, ok := m[k]; !ok {
			return fmt.Errorf("%s: missing %q", b, k)
		}
	}
	for k := range m {
		if !slices.Contains(keys.required, k) && !slices.Contains(keys.optional, k) {
			return fmt.Errorf("%s: key %q not allowed", b, k)
		}
	}
	return nil
}

// message is what an AI SDK reader rebuilds from a chunk stream, reduced
// to what the tests compare.
type message struct {
	id        string
	texts     map[string]*strings.Builder // by part id
	textOrder []string
	reasoning []string
	tools     map[string]*toolPart
	toolOrder []string
	data      map[string]json.RawMessage // by type + "/" + id (last value)
	finished  string                     // finish reason
	errors    []string
}

type toolPart struct {
	name, state, errorText string
	input, output          json.RawMessage
}

// read applies the rules of the AI SDK's processUIMessageStream (and
// stricter ones this package promises) to chunks and returns the message,
// or the first violation.
func read(chunks []Chunk) (*message, error) {
	m := &message{texts: map[string]*strings.Builder{}, tools: map[string]*toolPart{}, data: map[string]json.RawMessage{}}
	activeText, activeReasoning := map[string]bool{}, map[string]bool{}
	usedIDs := map[string]bool{}
	started, step, done := false, false, false
	for i, c := range chunks {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("chunk %d (%s %s%s): %s", i, c.Type, c.ID, c.ToolCallID, fmt.Sprintf(format, args...))
		}
		if err := checkSchema(c); err != nil {
			return nil, fail("%v", err)
		}
		if done {
			return nil, fail("after finish")
		}
		if !started && c.Type != TypeStart {
			return nil, fail("before start")
		}
		switch c.Type {
		case TypeStart:
			if started {
				return nil, fail("second start")
			}
			started, m.id = true, c.MessageID
		case TypeStartStep:
			if step {
				return nil, fail("step already open")
			}
			step = true
		case TypeFinishStep:
			if !step {
				return nil, fail("no open step")
			}
			if len(activeText) > 0 || len(activeReasoning) > 0 {
				return nil, fail("parts still open: %v %v", activeText, activeReasoning)
			}
			step = false
		case TypeTextStart, TypeReasoningStart:
			if !step {
				return nil, fail("outside a step")
			}
			if usedIDs[c.Type+c.ID] {
				return nil, fail("id reused")
			}
			usedIDs[c.Type+c.ID] = true
			if c.Type == TypeTextStart {
				activeText[c.ID] = true
				m.texts[c.ID] = &strings.Builder{}
				m.textOrder = append(m.textOrder, c.ID)
			} else {
				activeReasoning[c.ID] = true
				m.reasoning = append(m.reasoning, "")
			}
		case TypeTextDelta:
			if !activeText[c.ID] {
				return nil, fail("text-delta for missing text part")
			}
			m.texts[c.ID].WriteString(c.Delta)
		case TypeTextEnd:
			if !activeText[c.ID] {
				return nil, fail("text-end for missing text part")
			}
			delete(activeText, c.ID)
		case TypeReasoningDelta:
			if !activeReasoning[c.ID] {
				return nil, fail("reasoning-delta for missing reasoning part")
			}
			m.reasoning[len(m.reasoning)-1] += c.Delta
		case TypeReasoningEnd:
			if !activeReasoning[c.ID] {
				return nil, fail("reasoning-end for missing reasoning part")
			}
			delete(activeReasoning, c.ID)
		case TypeToolInputStart, TypeToolInputAvailable:
			if !step {
				return nil, fail("outside a step")
			}
			p, ok := m.tools[c.ToolCallID]
			if c.Type == TypeToolInputStart {
				if ok {
					return nil, fail("tool call started twice")
				}
				p = &toolPart{name: c.ToolName, state: "input-streaming"}
				m.tools[c.ToolCallID] = p
				m.toolOrder = append(m.toolOrder, c.ToolCallID)
			} else {
				if !ok || p.state != "input-streaming" {
					return nil, fail("tool-input-available without tool-input-start")
				}
				p.state, p.input = "input-available", c.Input
			}
		case TypeToolOutputAvailable, TypeToolOutputError:
			p, ok := m.tools[c.ToolCallID]
			if !ok {
				return nil, fail("no tool invocation found")
			}
			if p.state != "input-available" {
				return nil, fail("tool output in state %s", p.state)
			}
			if c.Type == TypeToolOutputAvailable {
				p.state, p.output = "output-available", c.Output
			} else {
				p.state, p.errorText = "output-error", c.ErrorText
			}
		case TypeError:
			m.errors = append(m.errors, c.ErrorText)
		case TypeFinish:
			if step || len(activeText) > 0 || len(activeReasoning) > 0 {
				return nil, fail("finish with an open step or part")
			}
			done, m.finished = true, c.FinishReason
		case TypeSourceURL:
		default: // data-*
			if !c.Transient {
				m.data[c.Type+"/"+c.ID] = c.Data
			}
		}
	}
	return m, nil
}

// text returns the texts of the message's text parts that were not
// discarded, joined by "|".
func (m *message) text() string {
	discarded := map[string]bool{}
	for k, v := range m.data {
		if strings.HasPrefix(k, DataTextDiscarded+"/") {
			var d discardedData
			_ = json.Unmarshal(v, &d)
			discarded[d.TextID] = true
		}
	}
	var parts []string
	for _, id := range m.textOrder {
		if !discarded[id] {
			parts = append(parts, m.texts[id].String())
		}
	}
	return strings.Join(parts, "|")
}
