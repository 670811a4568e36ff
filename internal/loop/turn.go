package loop

import (
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// Turn is one entry of the conversation history (seed 000 §2.4): one of
// *UserTurn, *AssistantTurn, *ToolResultsTurn, *SystemTurn, *SteeringTurn.
type Turn interface {
	// When is the turn's timestamp.
	When() time.Time
	// messages converts the turn to request messages.
	messages() []llm.Message
	// size is the turn's size in characters for the context estimate.
	size() int
}

// UserTurn is a user input.
type UserTurn struct {
	Content   string
	Timestamp time.Time
}

// AssistantTurn is one model response.
type AssistantTurn struct {
	Content    string
	ToolCalls  []llm.ToolCall
	Reasoning  string
	Usage      llm.Usage
	ResponseID string
	// Message is the full assistant message with provider raw parts, sent
	// back verbatim on later requests.
	Message   llm.Message
	Timestamp time.Time
}

// ToolResultsTurn holds one result per tool call of the preceding
// AssistantTurn, in call order.
type ToolResultsTurn struct {
	Results   []llm.ToolResult
	Timestamp time.Time
}

// SystemTurn is a system message inside the history.
type SystemTurn struct {
	Content   string
	Timestamp time.Time
}

// SteeringTurn is a message injected between tool rounds (steering or a
// loop-detection warning); the model sees it as a user message.
type SteeringTurn struct {
	Content   string
	Timestamp time.Time
}

// When implements Turn.
func (t *UserTurn) When() time.Time { return t.Timestamp }

// When implements Turn.
func (t *AssistantTurn) When() time.Time { return t.Timestamp }

// When implements Turn.
func (t *ToolResultsTurn) When() time.Time { return t.Timestamp }

// When implements Turn.
func (t *SystemTurn) When() time.Time { return t.Timestamp }

// When implements Turn.
func (t *SteeringTurn) When() time.Time { return t.Timestamp }

func (t *UserTurn) messages() []llm.Message {
	return []llm.Message{llm.TextMessage(llm.RoleUser, t.Content)}
}

func (t *AssistantTurn) messages() []llm.Message { return []llm.Message{t.Message} }

func (t *ToolResultsTurn) messages() []llm.Message {
	m := llm.Message{Role: llm.RoleTool}
	for i := range t.Results {
		r := t.Results[i]
		m.Content = append(m.Content, llm.ContentPart{Kind: llm.PartToolResult, ToolResult: &r})
	}
	return []llm.Message{m}
}

func (t *SystemTurn) messages() []llm.Message {
	return []llm.Message{llm.TextMessage(llm.RoleSystem, t.Content)}
}

// SteeringTurns become user-role messages (seed 000 §2.6). They follow the
// ToolResultsTurn in history; adapters put tool results first where the
// provider requires it.
func (t *SteeringTurn) messages() []llm.Message {
	return []llm.Message{llm.TextMessage(llm.RoleUser, t.Content)}
}

func (t *UserTurn) size() int { return len(t.Content) }

func (t *AssistantTurn) size() int {
	n := len(t.Content) + len(t.Reasoning)
	for _, c := range t.ToolCalls {
		n += len(c.Name) + len(c.Arguments)
	}
	for _, p := range t.Message.Content {
		if p.Kind == llm.PartWebSearch {
			n += len(p.Raw) // search results the provider reads back on later turns
		}
	}
	return n
}

func (t *ToolResultsTurn) size() int {
	n := 0
	for _, r := range t.Results {
		n += len(r.Content)
	}
	return n
}

func (t *SystemTurn) size() int   { return len(t.Content) }
func (t *SteeringTurn) size() int { return len(t.Content) }

// historyMessages converts history to request messages (seed 000 §2.5
// convert_history_to_messages).
func historyMessages(history []Turn) []llm.Message {
	msgs := make([]llm.Message, 0, len(history))
	for _, t := range history {
		msgs = append(msgs, t.messages()...)
	}
	return msgs
}
