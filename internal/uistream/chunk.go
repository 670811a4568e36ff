package uistream

import (
	"encoding/json"
	"fmt"
)

// Chunk types of the AI SDK v6 UIMessageChunk union (package ai,
// ui-message-stream/ui-message-chunks.ts). Data chunks have the type
// "data-<name>".
const (
	TypeStart               = "start"
	TypeFinish              = "finish"
	TypeStartStep           = "start-step"
	TypeFinishStep          = "finish-step"
	TypeTextStart           = "text-start"
	TypeTextDelta           = "text-delta"
	TypeTextEnd             = "text-end"
	TypeReasoningStart      = "reasoning-start"
	TypeReasoningDelta      = "reasoning-delta"
	TypeReasoningEnd        = "reasoning-end"
	TypeToolInputStart      = "tool-input-start"
	TypeToolInputAvailable  = "tool-input-available"
	TypeToolOutputAvailable = "tool-output-available"
	TypeToolOutputError     = "tool-output-error"
	TypeSourceURL           = "source-url"
	TypeError               = "error"
)

// Chunk is one UIMessageChunk. Which fields are set depends on Type; its
// JSON holds exactly the fields the AI SDK's strict schema allows for that
// type (see MarshalJSON).
type Chunk struct {
	Type string
	// ID is the part id of text-*, reasoning-* and (optionally) data-*.
	ID string
	// Delta is the text of text-delta and reasoning-delta.
	Delta string
	// ToolCallID and ToolName identify a tool call (tool-*).
	ToolCallID string
	ToolName   string
	// Input is the tool input of tool-input-available (JSON).
	Input json.RawMessage
	// Output is the tool output of tool-output-available (JSON).
	Output json.RawMessage
	// ErrorText is the message of error and tool-output-error.
	ErrorText string
	// Dynamic marks tool chunks of tools the client does not know
	// statically: the reader makes "dynamic-tool" parts of them.
	Dynamic bool
	// MessageID is the message id of start.
	MessageID string
	// FinishReason is the reason of finish (stop, error, ...).
	FinishReason string
	// SourceID, URL and Title describe a source-url.
	SourceID, URL, Title string
	// Data is the payload of a data-* chunk (JSON).
	Data json.RawMessage
	// Transient data chunks are delivered to the client's onData only and
	// never become a part of the message.
	Transient bool
}

type (
	startJSON struct {
		Type      string `json:"type"`
		MessageID string `json:"messageId,omitempty"`
	}
	finishJSON struct {
		Type         string `json:"type"`
		FinishReason string `json:"finishReason,omitempty"`
	}
	typeJSON struct {
		Type string `json:"type"`
	}
	partJSON struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	}
	deltaJSON struct {
		Type  string `json:"type"`
		ID    string `json:"id"`
		Delta string `json:"delta"`
	}
	toolStartJSON struct {
		Type       string `json:"type"`
		ToolCallID string `json:"toolCallId"`
		ToolName   string `json:"toolName"`
		Dynamic    bool   `json:"dynamic,omitempty"`
	}
	toolInputJSON struct {
		Type       string          `json:"type"`
		ToolCallID string          `json:"toolCallId"`
		ToolName   string          `json:"toolName"`
		Input      json.RawMessage `json:"input"`
		Dynamic    bool            `json:"dynamic,omitempty"`
	}
	toolOutputJSON struct {
		Type       string          `json:"type"`
		ToolCallID string          `json:"toolCallId"`
		Output     json.RawMessage `json:"output"`
		Dynamic    bool            `json:"dynamic,omitempty"`
	}
	toolErrorJSON struct {
		Type       string `json:"type"`
		ToolCallID string `json:"toolCallId"`
		ErrorText  string `json:"errorText"`
		Dynamic    bool   `json:"dynamic,omitempty"`
	}
	sourceJSON struct {
		Type     string `json:"type"`
		SourceID string `json:"sourceId"`
		URL      string `json:"url"`
		Title    string `json:"title,omitempty"`
	}
	errorJSON struct {
		Type      string `json:"type"`
		ErrorText string `json:"errorText"`
	}
	dataJSON struct {
		Type      string          `json:"type"`
		ID        string          `json:"id,omitempty"`
		Data      json.RawMessage `json:"data"`
		Transient bool            `json:"transient,omitempty"`
	}
)

// jsonNull is the JSON of a missing input, output or data.
var jsonNull = json.RawMessage("null")

func orNull(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return jsonNull
	}
	return r
}

// MarshalJSON writes the chunk with the fields of its type only: the AI SDK
// validates chunks with strict objects, which refuse unknown keys.
func (c Chunk) MarshalJSON() ([]byte, error) {
	var v any
	switch c.Type {
	case TypeStart:
		v = startJSON{c.Type, c.MessageID}
	case TypeFinish:
		v = finishJSON{c.Type, c.FinishReason}
	case TypeStartStep, TypeFinishStep:
		v = typeJSON{c.Type}
	case TypeTextStart, TypeTextEnd, TypeReasoningStart, TypeReasoningEnd:
		v = partJSON{c.Type, c.ID}
	case TypeTextDelta, TypeReasoningDelta:
		v = deltaJSON{c.Type, c.ID, c.Delta}
	case TypeToolInputStart:
		v = toolStartJSON{c.Type, c.ToolCallID, c.ToolName, c.Dynamic}
	case TypeToolInputAvailable:
		v = toolInputJSON{c.Type, c.ToolCallID, c.ToolName, orNull(c.Input), c.Dynamic}
	case TypeToolOutputAvailable:
		v = toolOutputJSON{c.Type, c.ToolCallID, orNull(c.Output), c.Dynamic}
	case TypeToolOutputError:
		v = toolErrorJSON{c.Type, c.ToolCallID, c.ErrorText, c.Dynamic}
	case TypeSourceURL:
		v = sourceJSON{c.Type, c.SourceID, c.URL, c.Title}
	case TypeError:
		v = errorJSON{c.Type, c.ErrorText}
	default:
		if !IsData(c.Type) {
			return nil, fmt.Errorf("marshal chunk: unknown type %q", c.Type)
		}
		v = dataJSON{c.Type, c.ID, orNull(c.Data), c.Transient}
	}
	return json.Marshal(v)
}

// IsData reports whether typ is a data-* chunk type.
func IsData(typ string) bool { return len(typ) > len("data-") && typ[:len("data-")] == "data-" }
