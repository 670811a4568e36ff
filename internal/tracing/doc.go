// Package tracing exports OpenTelemetry traces of agent sessions.
//
// Setup builds the TracerProvider the standard OTEL_* environment variables
// ask for: an SDK provider exporting with OTLP when an OTLP endpoint is set,
// a no-op provider otherwise. A Tracer turns the live events of every
// session a runner drives (it is a runner.Observer) into spans that follow
// the OpenTelemetry GenAI semantic conventions:
//
//	invoke_agent            one input: USER_INPUT .. SESSION_END or the next USER_INPUT
//	├── chat {model}        one model call: ASSISTANT_TEXT_START .. ASSISTANT_TEXT_END (or ERROR)
//	├── execute_tool {tool} one tool call: TOOL_CALL_START .. TOOL_CALL_END
//	└── ...
//
// Tool spans are children of the input span, not of a chat span: a tool
// call starts after the model call that asked for it has ended. Each tool
// span links to that chat span. All inputs of one session share one trace,
// whose ID is derived from the session UID (see SessionTraceID).
//
// Spans carry identifiers, counts and sizes only, never prompt, response or
// tool contents: those may hold secrets.
package tracing
