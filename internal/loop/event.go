package loop

import (
	"encoding/json"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// EventKind is the type of a SessionEvent (seed 000 §2.9).
type EventKind string

// Event kinds. WARNING is used by the context-usage check of seed 000 §5.5
// and for non-fatal provider conditions.
const (
	EventSessionStart        EventKind = "SESSION_START"
	EventSessionEnd          EventKind = "SESSION_END"
	EventUserInput           EventKind = "USER_INPUT"
	EventAssistantTextStart  EventKind = "ASSISTANT_TEXT_START"
	EventAssistantTextDelta  EventKind = "ASSISTANT_TEXT_DELTA"
	EventAssistantTextEnd    EventKind = "ASSISTANT_TEXT_END"
	EventToolCallStart       EventKind = "TOOL_CALL_START"
	EventToolCallOutputDelta EventKind = "TOOL_CALL_OUTPUT_DELTA"
	EventToolCallEnd         EventKind = "TOOL_CALL_END"
	EventSteeringInjected    EventKind = "STEERING_INJECTED"
	EventTurnLimit           EventKind = "TURN_LIMIT"
	EventLoopDetection       EventKind = "LOOP_DETECTION"
	EventError               EventKind = "ERROR"
	EventWarning             EventKind = "WARNING"
	// EventContextCompacted says old history was replaced by one summary
	// (compaction.go); restore replays it without calling the model.
	EventContextCompacted EventKind = "CONTEXT_COMPACTED"
	// EventPlanUpdated carries the model's current plan (the todo tool).
	EventPlanUpdated EventKind = "PLAN_UPDATED"
)

// Event is one SessionEvent. Seq starts at 1 for a session and increases by
// one per event with no gaps, also across a restore from the journal, so
// (SessionID, Seq) identifies an event for de-duplication.
type Event struct {
	Kind      EventKind `json:"kind"`
	Time      time.Time `json:"time"`
	SessionID string    `json:"session"`
	Seq       uint64    `json:"seq"`
	Data      EventData `json:"data"`
}

// EventData carries the fields of an event; which are set depends on Kind:
//
//	SESSION_START          State
//	SESSION_END            State, Text (last assistant text), Error (if closed by an error)
//	USER_INPUT             Content, FollowUp (true when it came from the follow-up queue)
//	ASSISTANT_TEXT_START   -
//	ASSISTANT_TEXT_DELTA   Delta
//	ASSISTANT_TEXT_END     Text, Reasoning, Usage, ResponseID, Assistant (the full
//	                       assistant message incl. tool calls and provider raw parts:
//	                       the journal rebuilds history from it), Context (window
//	                       and the size of the request this response answered),
//	                       WebSearches and Citations (the provider-hosted web
//	                       searches of the response and the citations of its
//	                       text, also found in Assistant; omitted when none)
//	TOOL_CALL_START        ToolName, CallID, Arguments
//	TOOL_CALL_OUTPUT_DELTA CallID, Delta
//	TOOL_CALL_END          ToolName, CallID, Output (FULL, untruncated) or Error,
//	                       IsError, DurationMs
//	STEERING_INJECTED      Content (also used for loop-detection warnings when
//	                       they are appended as SteeringTurns: see LOOP_DETECTION)
//	TURN_LIMIT             Round or TotalTurns
//	LOOP_DETECTION         Message (the warning appended as a SteeringTurn)
//	ERROR                  Message, ErrorKind
//	WARNING                Message
//	CONTEXT_COMPACTED      Compaction (tokens before/after, turns replaced, the
//	                       summary text restore puts in their place), DurationMs
//	PLAN_UPDATED           Plan (the whole current plan), CallID
type EventData struct {
	State      string          `json:"state,omitempty"`
	Content    string          `json:"content,omitempty"`
	FollowUp   bool            `json:"followUp,omitempty"`
	Delta      string          `json:"delta,omitempty"`
	Text       string          `json:"text,omitempty"`
	Reasoning  string          `json:"reasoning,omitempty"`
	Usage      *llm.Usage      `json:"usage,omitempty"`
	ResponseID string          `json:"responseId,omitempty"`
	Assistant  *llm.Message    `json:"assistant,omitempty"`
	ToolName   string          `json:"toolName,omitempty"`
	CallID     string          `json:"callId,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Output     string          `json:"output,omitempty"`
	Error      string          `json:"error,omitempty"`
	IsError    bool            `json:"isError,omitempty"`
	DurationMs int64           `json:"durationMs,omitempty"`
	Round      int             `json:"round,omitempty"`
	TotalTurns int             `json:"totalTurns,omitempty"`
	Message    string          `json:"message,omitempty"`
	ErrorKind  string          `json:"errorKind,omitempty"`
	// Files are the file views a tool call recorded (TOOL_CALL_END): path
	// to SHA-256 and size of what the model saw; a size of -1 means the
	// file was deleted or moved away. Restore rebuilds read tracking from it.
	Files map[string]FileView `json:"files,omitempty"`
	// Context is the context accounting of ASSISTANT_TEXT_END.
	Context *ContextUsage `json:"context,omitempty"`
	// Compaction describes a CONTEXT_COMPACTED event.
	Compaction *Compaction `json:"compaction,omitempty"`
	// Plan is the current plan of PLAN_UPDATED (at most MaxPlanItems).
	Plan []PlanItem `json:"plan,omitempty"`
	// Changes is the host's structured summary of CHANGES_RECORDED (see
	// host.go): counts and paths, no file contents.
	Changes json.RawMessage `json:"changes,omitempty"`
	// WebSearches are the searches the provider ran with its own web
	// search tool for this response (ASSISTANT_TEXT_END): queries and the
	// pages found.
	WebSearches []llm.WebSearchCall `json:"webSearches,omitempty"`
	// Citations are the sources the response's text cites
	// (ASSISTANT_TEXT_END): URL, title, cited text.
	Citations []llm.Citation `json:"citations,omitempty"`
}
