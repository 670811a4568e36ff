package uistream

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// Data chunk types of the operator facts (see docs/events.md, "UI message
// stream").
const (
	DataState         = "data-state"
	DataUserInput     = "data-user-input"
	DataSteering      = "data-steering"
	DataUsage         = "data-usage"
	DataPlan          = "data-plan"
	DataSubagent      = "data-subagent"
	DataChanges       = "data-changes"
	DataNotice        = "data-notice"
	DataCompaction    = "data-compaction"
	DataToolOutput    = "data-tool-output"
	DataTextDiscarded = "data-text-discarded"
	DataEvent         = "data-event"
)

// Tool names whose results are subagent facts.
const (
	toolSpawnAgent = "spawn_agent"
	toolWait       = "wait"
	toolCloseAgent = "close_agent"
)

// Converter turns the events of one session, fed in seq order from seq 1,
// into UIMessageChunks. It keeps the ordering the AI SDK reader requires:
// one start first, every text-delta between the text-start and text-end of
// its id, every reasoning-delta likewise, every text and reasoning part
// ended before its step's finish-step, every step ended before finish,
// every tool-output after the tool-input of its call. Every id is derived
// from event seqs, so equal event sequences give equal chunk sequences.
//
// A Converter is not safe for concurrent use.
type Converter struct {
	messageID string
	started   bool
	finished  bool
	stepOpen  bool
	// text is the id of the open text part, "" when none.
	text string
	// responding: an ASSISTANT_TEXT_START without its ASSISTANT_TEXT_END.
	responding bool
	// tools are the calls whose input was sent and whose output was not,
	// with their input.
	tools map[string]json.RawMessage
	usage usageData
	// endError is the error of the last SESSION_END, for finish.
	endError bool
}

// NewConverter returns a Converter whose start chunk carries messageID (the
// session uid is a good one; "" sends none).
func NewConverter(messageID string) *Converter {
	return &Converter{messageID: messageID, tools: map[string]json.RawMessage{}}
}

// usageData is the payload of data-usage: the session's running totals.
type usageData struct {
	InputTokens      int64 `json:"inputTokens"`
	OutputTokens     int64 `json:"outputTokens"`
	ReasoningTokens  int64 `json:"reasoningTokens,omitempty"`
	CacheReadTokens  int64 `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
	TotalTokens      int64 `json:"totalTokens"`
	// Turns counts the model responses (ASSISTANT_TEXT_END events).
	Turns int `json:"turns"`
	// ContextWindow and RequestTokens are those of the last response.
	ContextWindow int    `json:"contextWindow,omitempty"`
	RequestTokens int64  `json:"requestTokens,omitempty"`
	Seq           uint64 `json:"seq"`
}

// Event returns the chunks of ev. After Finish it returns nothing.
func (c *Converter) Event(ev loop.Event) []Chunk {
	if c.finished {
		return nil
	}
	var out []Chunk
	if !c.started {
		c.started = true
		out = append(out, Chunk{Type: TypeStart, MessageID: c.messageID})
	}
	d := ev.Data
	switch ev.Kind {
	case loop.EventSessionStart:
		out = append(out, dataChunk(DataState, "state", stateData{State: d.State, Seq: ev.Seq, Time: ev.Time}))
	case loop.EventSessionEnd:
		out = c.closeStep(out)
		c.endError = d.Error != ""
		out = append(out, dataChunk(DataState, "state", stateData{State: d.State, Error: d.Error, Seq: ev.Seq, Time: ev.Time}))
		if d.Error != "" {
			out = append(out, Chunk{Type: TypeError, ErrorText: d.Error})
		}
	case loop.EventUserInput:
		out = c.closeStep(out)
		out = append(out, dataChunk(DataUserInput, seqID("input", ev.Seq),
			messageData{Content: d.Content, FollowUp: d.FollowUp, Seq: ev.Seq, Time: ev.Time}))
	case loop.EventSteeringInjected:
		out = append(out, dataChunk(DataSteering, seqID("steering", ev.Seq), messageData{Content: d.Content, Seq: ev.Seq, Time: ev.Time}))
	case loop.EventAssistantTextStart:
		out = c.textStart(out, ev)
	case loop.EventAssistantTextDelta:
		if d.Delta == "" {
			break
		}
		out = c.openStep(out)
		if c.text == "" {
			c.text = seqID("text", ev.Seq)
			out = append(out, Chunk{Type: TypeTextStart, ID: c.text})
		}
		out = append(out, Chunk{Type: TypeTextDelta, ID: c.text, Delta: d.Delta})
	case loop.EventAssistantTextEnd:
		out = c.textEnd(out, ev)
	case loop.EventToolCallStart:
		out = c.openStep(out)
		out = c.toolInput(out, d.CallID, d.ToolName, toolInput(d.Arguments))
		out = append(out, eventChunk(ev))
	case loop.EventToolCallOutputDelta:
		if _, ok := c.tools[d.CallID]; ok && d.Delta != "" {
			ch := dataChunk(DataToolOutput, "", toolOutputDelta{ToolCallID: d.CallID, Delta: d.Delta, Seq: ev.Seq})
			ch.Transient = true
			out = append(out, ch)
		}
	case loop.EventToolCallEnd:
		out = c.toolEnd(out, ev)
		out = append(out, eventChunk(ev))
	case loop.EventTurnLimit:
		out = append(out, dataChunk(DataNotice, seqID("notice", ev.Seq),
			noticeData{Kind: "turn-limit", Round: d.Round, TotalTurns: d.TotalTurns, Seq: ev.Seq, Time: ev.Time}))
	case loop.EventLoopDetection:
		out = append(out, dataChunk(DataNotice, seqID("notice", ev.Seq),
			noticeData{Kind: "loop-detection", Message: d.Message, Seq: ev.Seq, Time: ev.Time}))
	case loop.EventWarning:
		out = append(out, dataChunk(DataNotice, seqID("notice", ev.Seq),
			noticeData{Kind: "warning", Message: d.Message, Seq: ev.Seq, Time: ev.Time}))
	case loop.EventError:
		msg := d.Message
		if d.ErrorKind != "" {
			msg = "[" + d.ErrorKind + "] " + msg
		}
		out = append(out, Chunk{Type: TypeError, ErrorText: orText(msg, "error")})
	case loop.EventContextCompacted:
		out = append(out, dataChunk(DataCompaction, seqID("compaction", ev.Seq),
			compactionData{Compaction: d.Compaction, DurationMs: d.DurationMs, Seq: ev.Seq, Time: ev.Time}))
	case loop.EventPlanUpdated:
		plan := d.Plan
		if plan == nil {
			plan = []loop.PlanItem{}
		}
		out = append(out, dataChunk(DataPlan, "plan", planData{Items: plan, Seq: ev.Seq, Time: ev.Time}))
	case loop.EventChangesRecorded:
		out = c.closeStep(out)
		out = append(out, dataChunk(DataChanges, "changes", changesData{Message: d.Message, Summary: d.Changes, Seq: ev.Seq, Time: ev.Time}))
	}
	return out
}

// Finish returns the chunks that end the message: the open text part and
// step are ended, then finish. Later calls return nothing.
func (c *Converter) Finish() []Chunk {
	if c.finished {
		return nil
	}
	var out []Chunk
	if !c.started {
		c.started = true
		out = append(out, Chunk{Type: TypeStart, MessageID: c.messageID})
	}
	out = c.closeStep(out)
	c.finished = true
	reason := "stop"
	if c.endError {
		reason = "error"
	}
	return append(out, Chunk{Type: TypeFinish, FinishReason: reason})
}

// textStart begins a model response. A text part still open means the
// previous attempt's stream was cut (loop.StreamRestartWarning): its text is
// ended and marked discarded, and the response goes on in the same step.
func (c *Converter) textStart(out []Chunk, ev loop.Event) []Chunk {
	if c.responding {
		if c.text != "" {
			out = append(out, Chunk{Type: TypeTextEnd, ID: c.text},
				dataChunk(DataTextDiscarded, seqID("discarded", ev.Seq), discardedData{TextID: c.text, Seq: ev.Seq}))
			c.text = ""
		}
		return c.openStep(out)
	}
	out = c.closeStep(out)
	c.responding = true
	return c.openStep(out)
}

func (c *Converter) textEnd(out []Chunk, ev loop.Event) []Chunk {
	d := ev.Data
	c.responding = false
	out = c.openStep(out)
	if d.Reasoning != "" {
		id := seqID("reasoning", ev.Seq)
		out = append(out, Chunk{Type: TypeReasoningStart, ID: id},
			Chunk{Type: TypeReasoningDelta, ID: id, Delta: d.Reasoning},
			Chunk{Type: TypeReasoningEnd, ID: id})
	}
	switch {
	case c.text != "":
		out = append(out, Chunk{Type: TypeTextEnd, ID: c.text})
		c.text = ""
	case d.Text != "": // not streamed
		id := seqID("text", ev.Seq)
		out = append(out, Chunk{Type: TypeTextStart, ID: id},
			Chunk{Type: TypeTextDelta, ID: id, Delta: d.Text},
			Chunk{Type: TypeTextEnd, ID: id})
	}
	for i, cit := range d.Citations {
		if cit.URL == "" {
			continue
		}
		out = append(out, Chunk{Type: TypeSourceURL, SourceID: seqID("source", ev.Seq) + "-" + strconv.Itoa(i), URL: cit.URL, Title: cit.Title})
	}
	c.usage.Turns++
	c.usage.Seq = ev.Seq
	if d.Usage != nil {
		c.usage.add(*d.Usage)
	}
	if d.Context != nil {
		c.usage.ContextWindow, c.usage.RequestTokens = d.Context.Window, d.Context.RequestTokens
	}
	return append(out, dataChunk(DataUsage, "usage", c.usage))
}

func (u *usageData) add(o llm.Usage) {
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.ReasoningTokens += o.ReasoningTokens
	u.CacheReadTokens += o.CacheReadTokens
	u.CacheWriteTokens += o.CacheWriteTokens
	u.TotalTokens = u.InputTokens + u.OutputTokens
}

func (c *Converter) toolInput(out []Chunk, callID, name string, input json.RawMessage) []Chunk {
	c.tools[callID] = input
	return append(out,
		Chunk{Type: TypeToolInputStart, ToolCallID: callID, ToolName: name, Dynamic: true},
		Chunk{Type: TypeToolInputAvailable, ToolCallID: callID, ToolName: name, Input: input, Dynamic: true})
}

func (c *Converter) toolEnd(out []Chunk, ev loop.Event) []Chunk {
	d := ev.Data
	input, ok := c.tools[d.CallID]
	if !ok {
		// A result without its call (the call was journaled before a gap
		// the reader skipped): send an input so the output has a part.
		input = json.RawMessage("{}")
		out = c.toolInput(c.openStep(out), d.CallID, d.ToolName, input)
	}
	delete(c.tools, d.CallID)
	if d.IsError {
		out = append(out, Chunk{Type: TypeToolOutputError, ToolCallID: d.CallID, Dynamic: true,
			ErrorText: orText(d.Error, orText(d.Output, "the tool failed"))})
	} else {
		out = append(out, Chunk{Type: TypeToolOutputAvailable, ToolCallID: d.CallID, Dynamic: true, Output: mustJSON(d.Output)})
	}
	if sub, ok := subagentFact(ev, input); ok {
		out = append(out, dataChunk(DataSubagent, "subagent-"+sub.Name, sub))
	}
	return out
}

// subagentFact reads what a subagent tool's result (and input) says about
// the child.
func subagentFact(ev loop.Event, input json.RawMessage) (subagentData, bool) {
	d := ev.Data
	if d.IsError {
		return subagentData{}, false
	}
	var res struct {
		AgentID   string `json:"agent_id"`
		Status    string `json:"status"`
		Success   *bool  `json:"success"`
		TurnsUsed int    `json:"turns_used"`
	}
	sub := subagentData{ToolCallID: d.CallID, Seq: ev.Seq, Time: ev.Time}
	switch d.ToolName {
	case toolSpawnAgent:
		if json.Unmarshal([]byte(d.Output), &res) != nil || res.AgentID == "" {
			return subagentData{}, false
		}
		sub.State = orText(res.Status, "running")
	case toolWait:
		if json.Unmarshal([]byte(d.Output), &res) != nil || res.AgentID == "" || res.Success == nil {
			return subagentData{}, false
		}
		sub.State, sub.TurnsUsed = "failed", res.TurnsUsed
		if *res.Success {
			sub.State = "succeeded"
		}
	case toolCloseAgent:
		var args struct {
			AgentID string `json:"agent_id"`
		}
		if json.Unmarshal(input, &args) != nil || args.AgentID == "" {
			return subagentData{}, false
		}
		res.AgentID, sub.State = args.AgentID, "closed"
	default:
		return subagentData{}, false
	}
	sub.Name = res.AgentID
	return sub, true
}

func (c *Converter) openStep(out []Chunk) []Chunk {
	if c.stepOpen {
		return out
	}
	c.stepOpen = true
	return append(out, Chunk{Type: TypeStartStep})
}

// closeStep ends the open text part and the open step.
func (c *Converter) closeStep(out []Chunk) []Chunk {
	if c.text != "" {
		out = append(out, Chunk{Type: TypeTextEnd, ID: c.text})
		c.text = ""
	}
	if c.stepOpen {
		c.stepOpen = false
		out = append(out, Chunk{Type: TypeFinishStep})
	}
	c.responding = false
	return out
}

// toolInput returns the tool input as JSON: the arguments when they are a
// JSON value, else the raw text as a JSON string, {} when empty.
func toolInput(args json.RawMessage) json.RawMessage {
	s := strings.TrimSpace(string(args))
	switch {
	case s == "":
		return json.RawMessage("{}")
	case json.Valid([]byte(s)):
		return json.RawMessage(s)
	default:
		return mustJSON(s)
	}
}

// mustJSON encodes v, which cannot fail for the payloads of this package.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return jsonNull
	}
	return b
}

func dataChunk(typ, id string, v any) Chunk {
	return Chunk{Type: typ, ID: id, Data: mustJSON(v)}
}

// eventChunk is the transient data-event chunk that follows a tool call's
// start and end: the journal position (seq) and publish time of what the
// page just got, so a client can tell how far it has read and how late.
func eventChunk(ev loop.Event) Chunk {
	ch := dataChunk(DataEvent, "", eventData{Kind: string(ev.Kind), Seq: ev.Seq, Time: ev.Time})
	ch.Transient = true
	return ch
}

func seqID(prefix string, seq uint64) string { return prefix + "-" + strconv.FormatUint(seq, 10) }

func orText(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}

// Payloads of the data chunks.
type (
	stateData struct {
		State string    `json:"state"`
		Error string    `json:"error,omitempty"`
		Seq   uint64    `json:"seq"`
		Time  time.Time `json:"time"`
	}
	messageData struct {
		Content  string    `json:"content"`
		FollowUp bool      `json:"followUp,omitempty"`
		Seq      uint64    `json:"seq"`
		Time     time.Time `json:"time"`
	}
	toolOutputDelta struct {
		ToolCallID string `json:"toolCallId"`
		Delta      string `json:"delta"`
		Seq        uint64 `json:"seq"`
	}
	noticeData struct {
		Kind       string    `json:"kind"`
		Message    string    `json:"message,omitempty"`
		Round      int       `json:"round,omitempty"`
		TotalTurns int       `json:"totalTurns,omitempty"`
		Seq        uint64    `json:"seq"`
		Time       time.Time `json:"time"`
	}
	compactionData struct {
		Compaction *loop.Compaction `json:"compaction,omitempty"`
		DurationMs int64            `json:"durationMs,omitempty"`
		Seq        uint64           `json:"seq"`
		Time       time.Time        `json:"time"`
	}
	planData struct {
		Items []loop.PlanItem `json:"items"`
		Seq   uint64          `json:"seq"`
		Time  time.Time       `json:"time"`
	}
	changesData struct {
		Message string          `json:"message"`
		Summary json.RawMessage `json:"summary,omitempty"`
		Seq     uint64          `json:"seq"`
		Time    time.Time       `json:"time"`
	}
	subagentData struct {
		// Name is the child's agent id: the child AgentSession's name when
		// the operator runs the session.
		Name       string    `json:"name"`
		State      string    `json:"state"`
		TurnsUsed  int       `json:"turnsUsed,omitempty"`
		ToolCallID string    `json:"toolCallId"`
		Seq        uint64    `json:"seq"`
		Time       time.Time `json:"time"`
	}
	eventData struct {
		Kind string    `json:"kind"`
		Seq  uint64    `json:"seq"`
		Time time.Time `json:"time"`
	}
	discardedData struct {
		TextID string `json:"textId"`
		Seq    uint64 `json:"seq"`
	}
)
