package tracing

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// instrumentationName is the instrumentation scope of the spans.
const instrumentationName = "github.com/agent-operator/agent-operator/internal/tracing"

// Bounds of a Tracer's state.
const (
	// defaultMaxSessions is how many sessions a Tracer follows at once. A
	// new session beyond it ends the spans of the one whose last event is
	// oldest: a session the runner let go of without a SESSION_END.
	defaultMaxSessions = 4096
	// defaultMaxOpenTools is how many tool calls of one session may be open
	// at once. A call beyond it gets its span when it ends, started at its
	// end minus its duration.
	defaultMaxOpenTools = 256
)

// Attribute keys beyond the semconv package. gen_ai.system is the name
// gen_ai.provider.name replaced; it is emitted too, for backends that still
// read it.
const (
	genAISystemKey    = attribute.Key("gen_ai.system")
	parentUIDKey      = attribute.Key("agent_operator.session.parent_uid")
	sessionStateKey   = attribute.Key("agent_operator.session.state")
	inputSizeKey      = attribute.Key("agent_operator.input.size")
	followUpKey       = attribute.Key("agent_operator.input.follow_up")
	resumedKey        = attribute.Key("agent_operator.input.resumed")
	turnsKey          = attribute.Key("agent_operator.turns")
	toolCallsKey      = attribute.Key("agent_operator.tool_calls")
	toolErrorsKey     = attribute.Key("agent_operator.tool_errors")
	textSizeKey       = attribute.Key("agent_operator.response.text.size")
	reasoningSizeKey  = attribute.Key("agent_operator.response.reasoning.size")
	requestedToolsKey = attribute.Key("agent_operator.response.tool_calls")
	requestTokensKey  = attribute.Key("agent_operator.request.tokens")
	contextWindowKey  = attribute.Key("agent_operator.context.window")
	streamRestartsKey = attribute.Key("agent_operator.stream.restarts")
	argumentsSizeKey  = attribute.Key("agent_operator.tool.arguments.size")
	outputSizeKey     = attribute.Key("agent_operator.tool.output.size")
	toolDurationKey   = attribute.Key("agent_operator.tool.duration_ms")
	roundKey          = attribute.Key("agent_operator.round")
	totalTurnsKey     = attribute.Key("agent_operator.total_turns")
	steeringSizeKey   = attribute.Key("agent_operator.steering.size")
	tokensBeforeKey   = attribute.Key("agent_operator.compaction.tokens_before")
	tokensAfterKey    = attribute.Key("agent_operator.compaction.tokens_after")
	turnsReplacedKey  = attribute.Key("agent_operator.compaction.turns")
	compactionMsKey   = attribute.Key("agent_operator.compaction.duration_ms")
	compactionDropKey = attribute.Key("agent_operator.compaction.dropped")
)

// Values of error.type besides the llm error kinds of ERROR events.
const (
	// ErrorTypeTool marks a tool call that returned an error result.
	ErrorTypeTool = "tool_error"
	// ErrorTypeInterrupted marks a span ended without its end event.
	ErrorTypeInterrupted = "interrupted"
	// errorTypeOther is semconv's fallback when nothing more specific is known.
	errorTypeOther = "_OTHER"
)

// interruptedMessage is the status description of an interrupted span.
const interruptedMessage = "ended without its end event: the session stopped or the runner let go of it"

// Tracer records the spans of the sessions whose events it observes. It
// implements runner.Observer; Observe never blocks on export (the SDK's
// batch processor drops spans when its queue is full).
type Tracer struct {
	tracer       trace.Tracer
	maxSessions  int
	maxOpenTools int

	mu       sync.Mutex
	sessions map[string]*session
}

// NewTracer returns a Tracer recording with tp, usually the provider of
// Setup.
func NewTracer(tp trace.TracerProvider) *Tracer {
	return &Tracer{
		tracer:       tp.Tracer(instrumentationName),
		maxSessions:  defaultMaxSessions,
		maxOpenTools: defaultMaxOpenTools,
		sessions:     map[string]*session{},
	}
}

// session is what a Tracer keeps of one session: its open spans.
type session struct {
	t       *Tracer
	info    runner.SessionInfo
	traceID trace.TraceID
	common  []attribute.KeyValue // on every span of the session
	seq     uint64               // of the last event
	last    time.Time            // of the last event

	input    trace.Span      // the open invoke_agent span, or nil
	inputCtx context.Context // holds input, the parent of chat and tools
	chat     trace.Span      // the open chat span, or nil
	restarts int             // stream restarts of chat
	lastChat trace.SpanContext
	tools    map[string]trace.Span // open execute_tool spans by call ID

	// Totals of the open input.
	turns, toolCalls, toolErrors int
	usage                        llm.Usage
	errKind                      string // of the last ERROR
}

// Observe turns ev into span starts and ends; see the package doc for the
// tree. Events of one session must come in order (the runner's contract).
func (t *Tracer) Observe(info runner.SessionInfo, ev loop.Event) {
	key := string(info.UID)
	if key == "" {
		key = ev.SessionID // not expected from the runner
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[key]
	if s != nil && ev.Seq != 0 && s.seq != 0 && ev.Seq != s.seq+1 {
		// Events were missed: the runner let go of the session and it was
		// driven elsewhere or restored. What was open will never end here.
		s.interrupt()
		delete(t.sessions, key)
		s = nil
	}
	if s == nil {
		if ev.Kind == loop.EventSessionEnd {
			return
		}
		s = t.track(key, info)
	}
	s.seq = ev.Seq
	if !ev.Time.IsZero() {
		s.last = ev.Time
	}
	s.observe(ev)
	if ev.Kind == loop.EventSessionEnd {
		delete(t.sessions, key)
	}
}

// Close ends every open span, at its session's last event, and forgets all
// sessions. Call it after the runner stopped and before the provider's
// shutdown, so that detached sessions' spans are exported.
func (t *Tracer) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, s := range t.sessions {
		s.interrupt()
		delete(t.sessions, key)
	}
}

// track starts following the session key (its UID), making room if needed.
func (t *Tracer) track(key string, info runner.SessionInfo) *session {
	if len(t.sessions) >= t.maxSessions {
		var oldest string
		for k, s := range t.sessions {
			if oldest == "" || s.last.Before(t.sessions[oldest].last) {
				oldest = k
			}
		}
		t.sessions[oldest].interrupt()
		delete(t.sessions, oldest)
	}
	provider, system := providerNames(info.Provider)
	s := &session{
		t: t, info: info, traceID: SessionTraceID(types.UID(key)),
		common: []attribute.KeyValue{
			semconv.GenAIConversationID(key),
			semconv.GenAIProviderNameKey.String(provider),
			genAISystemKey.String(system),
			semconv.GenAIRequestModel(info.Model),
		},
		tools: map[string]trace.Span{},
	}
	t.sessions[key] = s
	return s
}

// providerNames maps a spec provider to gen_ai.provider.name and the older
// gen_ai.system. OpenAI-compatible servers speak OpenAI's API, which is
// what both attributes name (semconv: "based on the instrumentation's best
// knowledge").
func providerNames(p string) (provider, system string) {
	switch p {
	case "gemini":
		return "gcp.gemini", "gemini"
	case "openai-compatible":
		return "openai", "openai"
	default:
		return p, p
	}
}

func (s *session) observe(ev loop.Event) {
	d := ev.Data
	switch ev.Kind {
	case loop.EventUserInput:
		s.endInput(ev.Time, "", "")
		s.startInput(ev.Time, false, d.FollowUp, inputSizeKey.Int(len(d.Content)))
	case loop.EventAssistantTextStart:
		s.ensureInput(ev.Time)
		if s.chat != nil { // the stream was cut and the call is made again
			s.restarts++
			s.chat.AddEvent("stream_restarted", trace.WithTimestamp(ev.Time))
			return
		}
		s.startChat(ev.Time)
	case loop.EventAssistantTextEnd:
		s.ensureInput(ev.Time)
		if s.chat == nil {
			s.startChat(ev.Time)
		}
		s.endChat(ev)
	case loop.EventError:
		s.modelError(ev)
	case loop.EventToolCallStart:
		s.ensureInput(ev.Time)
		s.startTool(ev)
	case loop.EventToolCallEnd:
		s.ensureInput(ev.Time)
		s.endTool(ev)
	case loop.EventSessionEnd:
		s.endInput(ev.Time, d.State, d.Error)
	case loop.EventTurnLimit:
		if d.Round > 0 {
			s.inputEvent("turn_limit", ev.Time, roundKey.Int(d.Round))
		} else {
			s.inputEvent("turn_limit", ev.Time, totalTurnsKey.Int(d.TotalTurns))
		}
	case loop.EventLoopDetection:
		s.inputEvent("loop_detected", ev.Time)
	case loop.EventSteeringInjected:
		s.inputEvent("steering_injected", ev.Time, steeringSizeKey.Int(len(d.Content)))
	case loop.EventContextCompacted:
		if c := d.Compaction; c != nil {
			s.inputEvent("context_compacted", ev.Time, tokensBeforeKey.Int(c.TokensBefore),
				tokensAfterKey.Int(c.TokensAfter), turnsReplacedKey.Int(c.Turns),
				compactionDropKey.Bool(c.Dropped), compactionMsKey.Int64(d.DurationMs))
		}
	}
}

// startInput starts the invoke_agent span of an input. The span is a root:
// with Setup's provider its trace ID is the session's.
func (s *session) startInput(at time.Time, resumed, followUp bool, attrs ...attribute.KeyValue) {
	attrs = append(attrs,
		semconv.GenAIOperationNameInvokeAgent,
		semconv.GenAIAgentName(s.info.Name),
		semconv.K8SNamespaceName(s.info.Namespace),
		followUpKey.Bool(followUp),
		resumedKey.Bool(resumed),
	)
	opts := []trace.SpanStartOption{
		trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(s.common...), trace.WithAttributes(attrs...),
	}
	if p := s.info.ParentUID; p != "" {
		opts = append(opts, trace.WithAttributes(parentUIDKey.String(string(p))))
		if parent := s.t.sessions[string(p)]; parent != nil && parent.input != nil {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: parent.input.SpanContext()}))
		}
	}
	opts = append(opts, startAt(at)...)
	s.inputCtx, s.input = s.t.tracer.Start(withTraceID(context.Background(), s.traceID), "invoke_agent", opts...)
	s.turns, s.toolCalls, s.toolErrors = 0, 0, 0
	s.usage, s.errKind, s.lastChat = llm.Usage{}, "", trace.SpanContext{}
}

// ensureInput starts an input span for an event that belongs to an input
// whose USER_INPUT this Tracer did not see: a session restored from its
// journal, by this manager or after another one let go of it.
func (s *session) ensureInput(at time.Time) {
	if s.input == nil {
		s.startInput(at, true, false)
	}
}

// endInput ends the open input span, and what is still open below it, at
// at. state is the session state SESSION_END reports ("" when the next
// USER_INPUT ends the input); errMsg, if set, says the session was closed by
// an error. Its text is not recorded: it may quote contents.
func (s *session) endInput(at time.Time, state, errMsg string) {
	if s.input == nil {
		return
	}
	s.endOpenChildren(at)
	s.input.SetAttributes(
		turnsKey.Int(s.turns), toolCallsKey.Int(s.toolCalls), toolErrorsKey.Int(s.toolErrors),
		semconv.GenAIUsageInputTokens(int(s.usage.InputTokens)),
		semconv.GenAIUsageOutputTokens(int(s.usage.OutputTokens)),
	)
	if state != "" {
		s.input.SetAttributes(sessionStateKey.String(state))
	}
	if errMsg != "" {
		kind := s.errKind
		if kind == "" {
			kind = errorTypeOther
		}
		s.input.SetAttributes(semconv.ErrorTypeKey.String(kind))
		s.input.SetStatus(codes.Error, "the session was closed by an error")
	}
	s.input.End(endAt(at)...)
	s.input, s.inputCtx = nil, nil
}

// interrupt ends every open span at the session's last event: their end
// events will never come.
func (s *session) interrupt() {
	if s.input == nil {
		return
	}
	s.endOpenChildren(s.last)
	interrupted(s.input)
	s.endInput(s.last, "", "")
}

// endOpenChildren ends the open chat and tool spans, interrupted, at at.
func (s *session) endOpenChildren(at time.Time) {
	if s.chat != nil {
		interrupted(s.chat)
		s.chat.End(endAt(at)...)
		s.chat = nil
	}
	for id, span := range s.tools {
		interrupted(span)
		span.End(endAt(at)...)
		delete(s.tools, id)
	}
}

func interrupted(span trace.Span) {
	span.SetAttributes(semconv.ErrorTypeKey.String(ErrorTypeInterrupted))
	span.SetStatus(codes.Error, interruptedMessage)
}

// inputEvent adds a span event to the open input span, if any.
func (s *session) inputEvent(name string, at time.Time, attrs ...attribute.KeyValue) {
	if s.input != nil {
		s.input.AddEvent(name, trace.WithTimestamp(at), trace.WithAttributes(attrs...))
	}
}

// startChat starts the chat span of a model call.
func (s *session) startChat(at time.Time) {
	name := "chat"
	if s.info.Model != "" {
		name += " " + s.info.Model
	}
	opts := append([]trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(s.common...),
		trace.WithAttributes(semconv.GenAIOperationNameChat),
	}, startAt(at)...)
	_, s.chat = s.t.tracer.Start(s.inputCtx, name, opts...)
	s.restarts = 0
}

// endChat ends the chat span with the response's usage and sizes.
func (s *session) endChat(ev loop.Event) {
	d := ev.Data
	attrs := []attribute.KeyValue{
		textSizeKey.Int(len(d.Text)),
		reasoningSizeKey.Int(len(d.Reasoning)),
	}
	if u := d.Usage; u != nil {
		attrs = append(attrs,
			semconv.GenAIUsageInputTokens(int(u.InputTokens)),
			semconv.GenAIUsageOutputTokens(int(u.OutputTokens)),
			semconv.GenAIUsageCacheReadInputTokens(int(u.CacheReadTokens)),
			semconv.GenAIUsageCacheCreationInputTokens(int(u.CacheWriteTokens)),
			semconv.GenAIUsageReasoningOutputTokens(int(u.ReasoningTokens)),
		)
		s.usage = s.usage.Add(*u)
	}
	if d.ResponseID != "" {
		attrs = append(attrs, semconv.GenAIResponseID(d.ResponseID))
	}
	if d.Assistant != nil {
		attrs = append(attrs, requestedToolsKey.Int(len(d.Assistant.ToolCalls())))
	}
	if c := d.Context; c != nil {
		attrs = append(attrs, requestTokensKey.Int64(c.RequestTokens), contextWindowKey.Int(c.Window))
	}
	if s.restarts > 0 {
		attrs = append(attrs, streamRestartsKey.Int(s.restarts))
	}
	s.chat.SetAttributes(attrs...)
	s.chat.End(endAt(ev.Time)...)
	s.lastChat = s.chat.SpanContext()
	s.chat = nil
	s.turns++
	s.errKind = "" // the call succeeded: an earlier error was recovered from
}

// modelError ends the open chat span with the error. A model error outside
// a call is noted on the input span. The message is not recorded.
func (s *session) modelError(ev loop.Event) {
	kind := ev.Data.ErrorKind
	if kind == "" {
		kind = errorTypeOther
	}
	s.errKind = kind
	if s.chat == nil {
		s.inputEvent("error", ev.Time, semconv.ErrorTypeKey.String(kind))
		return
	}
	s.chat.SetAttributes(semconv.ErrorTypeKey.String(kind))
	if s.restarts > 0 {
		s.chat.SetAttributes(streamRestartsKey.Int(s.restarts))
	}
	s.chat.SetStatus(codes.Error, "model call failed: "+kind)
	s.chat.End(endAt(ev.Time)...)
	s.lastChat = s.chat.SpanContext()
	s.chat = nil
}

// startTool starts the execute_tool span of a call, linked to the chat span
// of the response that asked for it.
func (s *session) startTool(ev loop.Event) {
	d := ev.Data
	if old := s.tools[d.CallID]; old != nil { // a call ID repeated before its end
		interrupted(old)
		old.End(endAt(ev.Time)...)
		delete(s.tools, d.CallID)
	}
	if len(s.tools) < s.t.maxOpenTools {
		s.tools[d.CallID] = s.newTool(ev, ev.Time)
	}
}

func (s *session) newTool(ev loop.Event, at time.Time) trace.Span {
	d := ev.Data
	opts := append([]trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(s.common...),
		trace.WithAttributes(
			semconv.GenAIOperationNameExecuteTool,
			semconv.GenAIToolName(d.ToolName),
			semconv.GenAIToolCallID(d.CallID),
			semconv.GenAIToolType("function"),
			argumentsSizeKey.Int(len(d.Arguments)),
		),
	}, startAt(at)...)
	if s.lastChat.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: s.lastChat}))
	}
	name := "execute_tool"
	if d.ToolName != "" {
		name += " " + d.ToolName
	}
	_, span := s.t.tracer.Start(s.inputCtx, name, opts...)
	return span
}

// endTool ends the execute_tool span of a call. A call without an open span
// (one a restore closes, or one beyond maxOpenTools) gets a span of its
// duration.
func (s *session) endTool(ev loop.Event) {
	d := ev.Data
	span := s.tools[d.CallID]
	delete(s.tools, d.CallID)
	if span == nil {
		span = s.newTool(ev, ev.Time.Add(-time.Duration(d.DurationMs)*time.Millisecond))
	}
	s.toolCalls++
	span.SetAttributes(outputSizeKey.Int(len(d.Output)), toolDurationKey.Int64(d.DurationMs))
	if d.IsError || d.Error != "" {
		s.toolErrors++
		span.SetAttributes(semconv.ErrorTypeKey.String(ErrorTypeTool))
		span.SetStatus(codes.Error, "the tool call returned an error")
	}
	span.End(endAt(ev.Time)...)
}

// startAt and endAt use an event's time; a zero time means now.
func startAt(t time.Time) []trace.SpanStartOption {
	if t.IsZero() {
		return nil
	}
	return []trace.SpanStartOption{trace.WithTimestamp(t)}
}

func endAt(t time.Time) []trace.SpanEndOption {
	if t.IsZero() {
		return nil
	}
	return []trace.SpanEndOption{trace.WithTimestamp(t)}
}
