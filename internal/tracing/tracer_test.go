package tracing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/runner"
)

var _ runner.Observer = (*Tracer)(nil)

const (
	uidParent = types.UID("6f1c2d3e-0000-4000-8000-000000000001")
	uidChild  = types.UID("6f1c2d3e-0000-4000-8000-000000000002")
	uidOther  = types.UID("6f1c2d3e-0000-4000-8000-000000000003")
)

var base = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// script is a scripted sequence of events of one or more sessions, with a
// clock that advances one second per event.
type script struct {
	now   time.Time
	steps []func(*Tracer)
}

func newScript() *script { return &script{now: base} }

type scriptSession struct {
	sc   *script
	info runner.SessionInfo
	seq  uint64
}

func (sc *script) session(name string, uid, parent types.UID) *scriptSession {
	return &scriptSession{sc: sc, info: runner.SessionInfo{
		Namespace: "team-a", Name: name, UID: uid, ParentUID: parent,
		Provider: "anthropic", Model: "claude-test",
	}}
}

// emit appends the next event of s and returns it.
func (s *scriptSession) emit(kind loop.EventKind, d loop.EventData) loop.Event {
	s.sc.now = s.sc.now.Add(time.Second)
	s.seq++
	ev := loop.Event{Kind: kind, Time: s.sc.now, SessionID: s.info.Name, Seq: s.seq, Data: d}
	info := s.info
	s.sc.steps = append(s.sc.steps, func(tr *Tracer) { tr.Observe(info, ev) })
	return ev
}

// miss makes the next n events of s happen without the Tracer seeing them.
func (s *scriptSession) miss(n uint64) {
	s.seq += n
	s.sc.now = s.sc.now.Add(time.Duration(n) * time.Second)
}

func (sc *script) then(f func(*Tracer)) { sc.steps = append(sc.steps, f) }

func (sc *script) play(tr *Tracer) {
	for _, f := range sc.steps {
		f(tr)
	}
}

// exportWith plays sc on a Tracer over Setup's provider exporting to a new
// receiver with protocol, shuts the provider down (which flushes) and
// returns what the receiver got and the Tracer.
func exportWith(t *testing.T, protocol string, sc *script, tune func(*Tracer)) ([]receivedSpan, *Tracer) {
	t.Helper()
	r, endpoint := startReceiver(t, protocol)
	clearEnv(t)
	t.Setenv(envEndpoint, endpoint)
	t.Setenv(envProtocol, protocol)
	tp, shutdown, err := Setup(t.Context())
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	tr := NewTracer(tp)
	if tune != nil {
		tune(tr)
	}
	sc.play(tr)
	if err := shutdown(t.Context()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	return r.received(t), tr
}

// clearEnv unsets, for the test, every OTEL_* variable Setup, the SDK and
// the exporters would read from the machine's environment.
func clearEnv(t *testing.T) {
	for _, k := range []string{
		envSDKDisabled, envTracesExporter, envEndpoint, envTracesEndpoint, envProtocol, envTracesProtocol,
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
		"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_INSECURE",
		"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
	} {
		t.Setenv(k, "")
	}
}

// node is a received span in comparable form; Parent and Links name spans.
type node struct {
	Name   string
	Kind   tracepb.Span_SpanKind
	Parent string
	Links  []string
	Start  time.Time
	End    time.Time
	Status tracepb.Status_StatusCode
	Attrs  map[string]any
	Events []string
}

func nodes(spans []receivedSpan) []node {
	names := map[string]string{}
	for _, sp := range spans {
		names[string(sp.GetSpanId())] = sp.GetName()
	}
	var out []node
	for _, sp := range spans {
		n := node{
			Name: sp.GetName(), Kind: sp.GetKind(),
			Start:  time.Unix(0, int64(sp.GetStartTimeUnixNano())).UTC(),
			End:    time.Unix(0, int64(sp.GetEndTimeUnixNano())).UTC(),
			Status: sp.GetStatus().GetCode(), Attrs: attrMap(sp.GetAttributes()),
		}
		if p := sp.GetParentSpanId(); len(p) > 0 {
			n.Parent = names[string(p)]
			if n.Parent == "" {
				n.Parent = "?unknown"
			}
		}
		for _, l := range sp.GetLinks() {
			n.Links = append(n.Links, names[string(l.GetSpanId())])
		}
		for _, e := range sp.GetEvents() {
			n.Events = append(n.Events, e.GetName())
		}
		out = append(out, n)
	}
	slices.SortStableFunc(out, func(a, b node) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// at is the time of the i-th event of a script (1-based).
func at(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }

func common(uid types.UID) map[string]any {
	return map[string]any{
		"gen_ai.conversation.id": string(uid),
		"gen_ai.provider.name":   "anthropic",
		"gen_ai.system":          "anthropic",
		"gen_ai.request.model":   "claude-test",
	}
}

func with(m map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func toolCallPart(id, name string) llm.ContentPart {
	return llm.ContentPart{Kind: llm.PartToolCall, ToolCall: &llm.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(`{}`)}}
}

// TestTracerExportsOneTracePerSession drives a Tracer with one session of
// two model calls and two tool calls (one failing) and checks, as a real
// OTLP receiver decodes it over both protocols, that the session is one
// trace with the documented tree, event times, GenAI attributes and token
// counts, and that no content reaches the wire.
func TestTracerExportsOneTracePerSession(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTP, ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			sc := newScript()
			s := sc.session("fix-bug", uidParent, "")
			const prompt = "Fix the failing test. The deploy token is SECRET-prompt."
			args1 := json.RawMessage(`{"path":"SECRET-args.go"}`)
			args2 := json.RawMessage(`{"command":"make test TOKEN=SECRET-cmd"}`)
			u1 := llm.Usage{InputTokens: 1200, OutputTokens: 80, ReasoningTokens: 30, CacheReadTokens: 1000, CacheWriteTokens: 150}
			u2 := llm.Usage{InputTokens: 1500, OutputTokens: 40, CacheReadTokens: 1300}
			text1, reasoning1 := "Let me look. SECRET-text", "thinking about SECRET-reasoning"
			output1 := "package main // SECRET-output"

			s.emit(loop.EventSessionStart, loop.EventData{State: "IDLE"})                      // 1
			s.emit(loop.EventUserInput, loop.EventData{Content: prompt})                       // 2
			s.emit(loop.EventAssistantTextStart, loop.EventData{})                             // 3
			s.emit(loop.EventAssistantTextDelta, loop.EventData{Delta: "Let me SECRET-delta"}) // 4
			s.emit(loop.EventAssistantTextEnd, loop.EventData{                                 // 5
				Text: text1, Reasoning: reasoning1, Usage: &u1, ResponseID: "msg_1",
				Assistant: &llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentPart{
					{Kind: llm.PartText, Text: text1}, toolCallPart("call-1", "read_file"), toolCallPart("call-2", "shell"),
				}},
				Context: &loop.ContextUsage{Window: 200000, RequestTokens: 1200},
			})
			s.emit(loop.EventToolCallStart, loop.EventData{ToolName: "read_file", CallID: "call-1", Arguments: args1}) // 6
			s.emit(loop.EventToolCallStart, loop.EventData{ToolName: "shell", CallID: "call-2", Arguments: args2})     // 7
			s.emit(loop.EventToolCallOutputDelta, loop.EventData{CallID: "call-2", Delta: "FAIL SECRET-delta"})        // 8
			s.emit(loop.EventToolCallEnd, loop.EventData{ToolName: "read_file", CallID: "call-1", Output: output1, DurationMs: 3000})
			s.emit(loop.EventToolCallEnd, loop.EventData{ToolName: "shell", CallID: "call-2", IsError: true, // 10
				Error: "exit status 2: SECRET-error", Output: "FAIL SECRET-fail", DurationMs: 3000})
			s.emit(loop.EventAssistantTextStart, loop.EventData{}) // 11
			s.emit(loop.EventAssistantTextEnd, loop.EventData{     // 12
				Text: "Fixed.", Usage: &u2, ResponseID: "msg_2",
				Assistant: &llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "Fixed."}}},
			})
			s.emit(loop.EventSessionEnd, loop.EventData{State: "IDLE", Text: "Fixed."}) // 13

			spans, tr := exportWith(t, protocol, sc, nil)

			tid := SessionTraceID(uidParent)
			for _, sp := range spans {
				if !bytes.Equal(sp.GetTraceId(), tid[:]) {
					t.Errorf("span %q in trace %x, want the session's %s", sp.GetName(), sp.GetTraceId(), tid)
				}
				if sp.resource["service.name"] != ServiceName {
					t.Errorf("span %q: service.name %v, want %s", sp.GetName(), sp.resource["service.name"], ServiceName)
				}
				if sp.scope != instrumentationName {
					t.Errorf("span %q: scope %q, want %q", sp.GetName(), sp.scope, instrumentationName)
				}
				assertNoContent(t, sp)
			}
			if n := len(tr.sessions); n != 0 {
				t.Errorf("Tracer still follows %d sessions after SESSION_END", n)
			}

			c := common(uidParent)
			chat := with(c, "gen_ai.operation.name", "chat")
			tool := with(c, "gen_ai.operation.name", "execute_tool", "gen_ai.tool.type", "function", "agent_operator.tool.duration_ms", int64(3000))
			want := []node{{
				Name: "invoke_agent", Kind: tracepb.Span_SPAN_KIND_INTERNAL, Start: at(2), End: at(13),
				Attrs: with(c, "gen_ai.operation.name", "invoke_agent", "gen_ai.agent.name", "fix-bug",
					"k8s.namespace.name", "team-a", "agent_operator.input.size", int64(len(prompt)),
					"agent_operator.input.follow_up", false, "agent_operator.input.resumed", false,
					"agent_operator.turns", int64(2), "agent_operator.tool_calls", int64(2), "agent_operator.tool_errors", int64(1),
					"gen_ai.usage.input_tokens", u1.InputTokens+u2.InputTokens,
					"gen_ai.usage.output_tokens", u1.OutputTokens+u2.OutputTokens,
					"agent_operator.session.state", "IDLE"),
			}, {
				Name: "chat claude-test", Kind: tracepb.Span_SPAN_KIND_CLIENT, Parent: "invoke_agent", Start: at(3), End: at(5),
				Attrs: with(chat, "gen_ai.usage.input_tokens", u1.InputTokens, "gen_ai.usage.output_tokens", u1.OutputTokens,
					"gen_ai.usage.cache_read.input_tokens", u1.CacheReadTokens,
					"gen_ai.usage.cache_creation.input_tokens", u1.CacheWriteTokens,
					"gen_ai.usage.reasoning.output_tokens", u1.ReasoningTokens,
					"gen_ai.response.id", "msg_1", "agent_operator.response.text.size", int64(len(text1)),
					"agent_operator.response.reasoning.size", int64(len(reasoning1)),
					"agent_operator.response.tool_calls", int64(2),
					"agent_operator.request.tokens", int64(1200), "agent_operator.context.window", int64(200000)),
			}, {
				Name: "execute_tool read_file", Kind: tracepb.Span_SPAN_KIND_INTERNAL, Parent: "invoke_agent",
				Links: []string{"chat claude-test"}, Start: at(6), End: at(9),
				Attrs: with(tool, "gen_ai.tool.name", "read_file", "gen_ai.tool.call.id", "call-1",
					"agent_operator.tool.arguments.size", int64(len(args1)), "agent_operator.tool.output.size", int64(len(output1))),
			}, {
				Name: "execute_tool shell", Kind: tracepb.Span_SPAN_KIND_INTERNAL, Parent: "invoke_agent",
				Links: []string{"chat claude-test"}, Start: at(7), End: at(10), Status: tracepb.Status_STATUS_CODE_ERROR,
				Attrs: with(tool, "gen_ai.tool.name", "shell", "gen_ai.tool.call.id", "call-2",
					"agent_operator.tool.arguments.size", int64(len(args2)), "agent_operator.tool.output.size", int64(len("FAIL SECRET-fail")),
					"error.type", ErrorTypeTool),
			}, {
				Name: "chat claude-test", Kind: tracepb.Span_SPAN_KIND_CLIENT, Parent: "invoke_agent", Start: at(11), End: at(12),
				Attrs: with(chat, "gen_ai.usage.input_tokens", u2.InputTokens, "gen_ai.usage.output_tokens", u2.OutputTokens,
					"gen_ai.usage.cache_read.input_tokens", u2.CacheReadTokens,
					"gen_ai.usage.cache_creation.input_tokens", int64(0),
					"gen_ai.usage.reasoning.output_tokens", int64(0),
					"gen_ai.response.id", "msg_2", "agent_operator.response.text.size", int64(len("Fixed.")),
					"agent_operator.response.reasoning.size", int64(0), "agent_operator.response.tool_calls", int64(0)),
			}}
			if diff := cmp.Diff(want, nodes(spans)); diff != "" {
				t.Errorf("spans (-want +got):\n%s", diff)
			}
		})
	}
}

// assertNoContent fails when any attribute, event or resource value of sp
// holds scripted content (every content string contains "SECRET").
func assertNoContent(t *testing.T, sp receivedSpan) {
	t.Helper()
	maps := []map[string]any{attrMap(sp.GetAttributes()), sp.resource}
	for _, e := range sp.GetEvents() {
		maps = append(maps, attrMap(e.GetAttributes()))
	}
	for _, m := range maps {
		for k, v := range m {
			if s, ok := v.(string); ok && strings.Contains(s, "SECRET") {
				t.Errorf("span %q: attribute %s carries content %q", sp.GetName(), k, s)
			}
		}
	}
	if strings.Contains(sp.GetStatus().GetMessage(), "SECRET") || strings.Contains(sp.GetName(), "SECRET") {
		t.Errorf("span %q (status %q) carries content", sp.GetName(), sp.GetStatus().GetMessage())
	}
}

func find(t *testing.T, ns []node, name string) []node {
	t.Helper()
	var out []node
	for _, n := range ns {
		if n.Name == name {
			out = append(out, n)
		}
	}
	return out
}

func one(t *testing.T, ns []node, name string) node {
	t.Helper()
	got := find(t, ns, name)
	if len(got) != 1 {
		t.Fatalf("%d spans %q, want 1; all: %+v", len(got), name, ns)
	}
	return got[0]
}

// interruptedAt checks n was ended by the Tracer at end, without its end
// event.
func interruptedAt(t *testing.T, n node, end time.Time) {
	t.Helper()
	if n.Status != tracepb.Status_STATUS_CODE_ERROR || n.Attrs["error.type"] != ErrorTypeInterrupted || !n.End.Equal(end) {
		t.Errorf("span %q: status %v, error.type %v, end %v; want ERROR, %s, %v",
			n.Name, n.Status, n.Attrs["error.type"], n.End, ErrorTypeInterrupted, end)
	}
}

func okAt(t *testing.T, n node, start, end time.Time) {
	t.Helper()
	if n.Status != tracepb.Status_STATUS_CODE_UNSET || !n.Start.Equal(start) || !n.End.Equal(end) {
		t.Errorf("span %q: status %v, %v..%v; want UNSET, %v..%v", n.Name, n.Status, n.Start, n.End, start, end)
	}
}

// TestTracerEdges covers inputs that do not run the plain way: stopped,
// let go of, restored, failing, restarting, follow-ups, subagents and the
// bounds on what a Tracer keeps.
func TestTracerEdges(t *testing.T) {
	tests := []struct {
		name   string
		script func(t *testing.T, sc *script)
		tune   func(*Tracer)
		check  func(t *testing.T, ns []node, spans []receivedSpan)
	}{{
		name: "session closed mid tool call ends the open spans at SESSION_END",
		script: func(t *testing.T, sc *script) {
			s := sc.session("a", uidParent, "")
			s.emit(loop.EventUserInput, loop.EventData{Content: "go"})                         // 1
			s.emit(loop.EventAssistantTextStart, loop.EventData{})                             // 2
			s.emit(loop.EventAssistantTextEnd, loop.EventData{Usage: &llm.Usage{}})            // 3
			s.emit(loop.EventToolCallStart, loop.EventData{ToolName: "shell", CallID: "c1"})   // 4
			s.emit(loop.EventSessionEnd, loop.EventData{State: "CLOSED", Error: "aborted: x"}) // 5
		},
		check: func(t *testing.T, ns []node, _ []receivedSpan) {
			interruptedAt(t, one(t, ns, "execute_tool shell"), at(5))
			in := one(t, ns, "invoke_agent")
			if in.Status != tracepb.Status_STATUS_CODE_ERROR || in.Attrs["error.type"] != errorTypeOther ||
				in.Attrs["agent_operator.session.state"] != "CLOSED" || !in.End.Equal(at(5)) {
				t.Errorf("input span %+v, want ERROR, error.type %s, state CLOSED, end %v", in, errorTypeOther, at(5))
			}
		},
	}, {
		name: "a session let go of without SESSION_END is ended by Close at its last event",
		script: func(t *testing.T, sc *script) {
			s := sc.session("a", uidParent, "")
			s.emit(loop.EventUserInput, loop.EventData{Content: "go"})             // 1
			s.emit(loop.EventAssistantTextStart, loop.EventData{})                 // 2
			s.emit(loop.EventAssistantTextDelta, loop.EventData{Delta: "partial"}) // 3
			sc.then(func(tr *Tracer) { tr.Close() })
		},
		check: func(t *testing.T, ns []node, _ []receivedSpan) {
			interruptedAt(t, one(t, ns, "chat claude-test"), at(3))
			interruptedAt(t, one(t, ns, "invoke_agent"), at(3))
		},
	}, {
		name: "missed events end what was open and start over in the same trace",
		script: func(t *testing.T, sc *script) {
			s := sc.session("a", uidParent, "")
			s.emit(loop.EventUserInput, loop.EventData{Content: "go"})      // 1
			s.emit(loop.EventToolCallStart, loop.EventData{ToolName: "t1"}) // 2
			s.miss(3)                                                       // 3..5 driven elsewhere
			s.emit(loop.EventAssistantTextStart, loop.EventData{})          // 6
			s.emit(loop.EventAssistantTextEnd, loop.EventData{})            // 7
			s.emit(loop.EventSessionEnd, loop.EventData{State: "IDLE"})     // 8
		},
		check: func(t *testing.T, ns []node, spans []receivedSpan) {
			ins := find(t, ns, "invoke_agent")
			if len(ins) != 2 {
				t.Fatalf("%d input spans, want 2", len(ins))
			}
			interruptedAt(t, ins[0], at(2))
			interruptedAt(t, one(t, ns, "execute_tool t1"), at(2))
			okAt(t, ins[1], at(6), at(8))
			if ins[0].Attrs["agent_operator.input.resumed"] != false || ins[1].Attrs["agent_operator.input.resumed"] != true {
				t.Errorf("resumed = %v, %v; want false, true", ins[0].Attrs["agent_operator.input.resumed"], ins[1].Attrs["agent_operator.input.resumed"])
			}
			assertOneTrace(t, spans, uidParent)
		},
	}, {
		name: "a model error ends its chat span with the error kind; the resumed call is a new chat span",
		script: func(t *testing.T, sc *script) {
			s := sc.session("a", uidParent, "")
			s.emit(loop.EventUserInput, loop.EventData{Content: "go"})                                                         // 1
			s.emit(loop.EventAssistantTextStart, loop.EventData{})                                                             // 2
			s.emit(loop.EventError, loop.EventData{Message: "429 SECRET-provider-text", ErrorKind: string(llm.KindRateLimit)}) // 3
			s.emit(loop.EventAssistantTextStart, loop.EventData{})                                                             // 4
			s.emit(loop.EventAssistantTextEnd, loop.EventData{Usage: &llm.Usage{InputTokens: 7, OutputTokens: 3}})             // 5
			s.emit(loop.EventSessionEnd, loop.EventData{State: "IDLE"})                                                        // 6
		},
		check: func(t *testing.T, ns []node, spans []receivedSpan) {
			chats := find(t, ns, "chat claude-test")
			if len(chats) != 2 {
				t.Fatalf("%d chat spans, want 2", len(chats))
			}
			if c := chats[0]; c.Status != tracepb.Status_STATUS_CODE_ERROR || c.Attrs["error.type"] != string(llm.KindRateLimit) || !c.End.Equal(at(3)) {
				t.Errorf("failed call %+v, want ERROR with error.type %s ending %v", c, llm.KindRateLimit, at(3))
			}
			okAt(t, chats[1], at(4), at(5))
			in := one(t, ns, "invoke_agent")
			okAt(t, in, at(1), at(6))
			if in.Attrs["gen_ai.usage.input_tokens"] != int64(7) || in.Attrs["agent_operator.turns"] != int64(1) {
				t.Errorf("input span attributes %v, want 7 input tokens and 1 turn", in.Attrs)
			}
			for _, sp := range spans {
				assertNoContent(t, sp)
			}
		},
	}, {
		name: "a restarted stream stays one chat span",
		script: func(t *testing.T, sc *script) {
			s := sc.session("a", uidParent, "")
			s.emit(loop.EventUserInput, loop.EventData{Content: "go"})                    // 1
			s.emit(loop.EventAssistantTextStart, loop.EventData{})                        // 2
			s.emit(loop.EventWarning, loop.EventData{Message: loop.StreamRestartWarning}) // 3
			s.emit(loop.EventAssistantTextStart, loop.EventData{})                        // 4
			s.emit(loop.EventAssistantTextEnd, loop.EventData{})                          // 5
			s.emit(loop.EventSessionEnd, loop.EventData{State: "IDLE"})                   // 6
		},
		check: func(t *testing.T, ns []node, _ []receivedSpan) {
			c := one(t, ns, "chat claude-test")
			okAt(t, c, at(2), at(5))
			if c.Attrs["agent_operator.stream.restarts"] != int64(1) || !slices.Equal(c.Events, []string{"stream_restarted"}) {
				t.Errorf("chat span restarts %v, events %v; want 1, [stream_restarted]", c.Attrs["agent_operator.stream.restarts"], c.Events)
			}
		},
	}, {
		name: "a follow-up input ends the previous input span and starts one in the same trace",
		script: func(t *testing.T, sc *script) {
			s := sc.session("a", uidParent, "")
			s.emit(loop.EventUserInput, loop.EventData{Content: "one"})                 // 1
			s.emit(loop.EventAssistantTextStart, loop.EventData{})                      // 2
			s.emit(loop.EventAssistantTextEnd, loop.EventData{})                        // 3
			s.emit(loop.EventUserInput, loop.EventData{Content: "two", FollowUp: true}) // 4
			s.emit(loop.EventAssistantTextStart, loop.EventData{})                      // 5
			s.emit(loop.EventAssistantTextEnd, loop.EventData{})                        // 6
			s.emit(loop.EventSessionEnd, loop.EventData{State: "AWAITING_INPUT"})       // 7
		},
		check: func(t *testing.T, ns []node, spans []receivedSpan) {
			ins := find(t, ns, "invoke_agent")
			if len(ins) != 2 {
				t.Fatalf("%d input spans, want 2", len(ins))
			}
			okAt(t, ins[0], at(1), at(4))
			okAt(t, ins[1], at(4), at(7))
			if ins[1].Attrs["agent_operator.input.follow_up"] != true || ins[1].Attrs["agent_operator.session.state"] != "AWAITING_INPUT" {
				t.Errorf("second input attributes %v, want follow_up and state AWAITING_INPUT", ins[1].Attrs)
			}
			if _, ok := ins[0].Attrs["agent_operator.session.state"]; ok {
				t.Errorf("first input has a session state, but no SESSION_END ended it")
			}
			assertOneTrace(t, spans, uidParent)
		},
	}, {
		name: "an input restored mid-way gets a resumed input span; a tool call closed by the restore spans its duration",
		script: func(t *testing.T, sc *script) {
			s := sc.session("a", uidParent, "")
			s.miss(7)                                                                                                       // replayed from the journal: not observed
			s.emit(loop.EventToolCallEnd, loop.EventData{ToolName: "shell", CallID: "c1", IsError: true, DurationMs: 5000}) // 8
			s.emit(loop.EventAssistantTextStart, loop.EventData{})                                                          // 9
			s.emit(loop.EventAssistantTextEnd, loop.EventData{})                                                            // 10
			s.emit(loop.EventSessionEnd, loop.EventData{State: "IDLE"})                                                     // 11
		},
		check: func(t *testing.T, ns []node, _ []receivedSpan) {
			in := one(t, ns, "invoke_agent")
			okAt(t, in, at(8), at(11))
			if in.Attrs["agent_operator.input.resumed"] != true {
				t.Errorf("input not marked resumed: %v", in.Attrs)
			}
			tool := one(t, ns, "execute_tool shell")
			if !tool.Start.Equal(at(8).Add(-5*time.Second)) || !tool.End.Equal(at(8)) || tool.Parent != "invoke_agent" {
				t.Errorf("tool span %+v, want %v..%v under invoke_agent", tool, at(8).Add(-5*time.Second), at(8))
			}
		},
	}, {
		name: "a child session's input span links to its parent's and keeps its own trace",
		script: func(t *testing.T, sc *script) {
			p := sc.session("parent", uidParent, "")
			c := sc.session("parent-sub-1", uidChild, uidParent)
			p.emit(loop.EventUserInput, loop.EventData{Content: "go"})                             // 1
			p.emit(loop.EventAssistantTextStart, loop.EventData{})                                 // 2
			p.emit(loop.EventAssistantTextEnd, loop.EventData{})                                   // 3
			p.emit(loop.EventToolCallStart, loop.EventData{ToolName: "spawn_agent", CallID: "s1"}) // 4
			c.emit(loop.EventUserInput, loop.EventData{Content: "sub task"})                       // 5
			c.emit(loop.EventSessionEnd, loop.EventData{State: "IDLE"})                            // 6
			p.emit(loop.EventToolCallEnd, loop.EventData{ToolName: "spawn_agent", CallID: "s1"})   // 7
			p.emit(loop.EventSessionEnd, loop.EventData{State: "IDLE"})                            // 8
		},
		check: func(t *testing.T, _ []node, spans []receivedSpan) {
			var parent, child receivedSpan
			for _, sp := range spans {
				if sp.GetName() != "invoke_agent" {
					continue
				}
				switch attrMap(sp.GetAttributes())["gen_ai.conversation.id"] {
				case string(uidParent):
					parent = sp
				case string(uidChild):
					child = sp
				}
			}
			if parent.Span == nil || child.Span == nil {
				t.Fatalf("want input spans of parent and child, got %d spans", len(spans))
			}
			ptid, ctid := SessionTraceID(uidParent), SessionTraceID(uidChild)
			if !bytes.Equal(parent.GetTraceId(), ptid[:]) || !bytes.Equal(child.GetTraceId(), ctid[:]) {
				t.Errorf("trace IDs %x, %x; want the sessions' %s, %s", parent.GetTraceId(), child.GetTraceId(), ptid, ctid)
			}
			links := child.GetLinks()
			if len(links) != 1 || !bytes.Equal(links[0].GetSpanId(), parent.GetSpanId()) || !bytes.Equal(links[0].GetTraceId(), parent.GetTraceId()) {
				t.Errorf("child links %v, want one to the parent's input span %x", links, parent.GetSpanId())
			}
			if got := attrMap(child.GetAttributes())["agent_operator.session.parent_uid"]; got != string(uidParent) {
				t.Errorf("child parent_uid %v, want %s", got, uidParent)
			}
		},
	}, {
		name: "steering, compaction and limits are events of the input span, without contents",
		script: func(t *testing.T, sc *script) {
			s := sc.session("a", uidParent, "")
			s.emit(loop.EventUserInput, loop.EventData{Content: "go"})                       // 1
			s.emit(loop.EventSteeringInjected, loop.EventData{Content: "also SECRET-steer"}) // 2
			s.emit(loop.EventContextCompacted, loop.EventData{DurationMs: 900, Compaction: &loop.Compaction{
				TokensBefore: 9000, TokensAfter: 1200, Turns: 14, Summary: "SECRET-summary"}}) // 3
			s.emit(loop.EventLoopDetection, loop.EventData{Message: "Loop detected"}) // 4
			s.emit(loop.EventTurnLimit, loop.EventData{Round: 20})                    // 5
			s.emit(loop.EventSessionEnd, loop.EventData{State: "IDLE"})               // 6
		},
		check: func(t *testing.T, ns []node, spans []receivedSpan) {
			in := one(t, ns, "invoke_agent")
			want := []string{"steering_injected", "context_compacted", "loop_detected", "turn_limit"}
			if !slices.Equal(in.Events, want) {
				t.Errorf("input span events %v, want %v", in.Events, want)
			}
			for _, sp := range spans {
				assertNoContent(t, sp)
				for _, e := range sp.GetEvents() {
					a := attrMap(e.GetAttributes())
					if e.GetName() == "context_compacted" && (a["agent_operator.compaction.tokens_before"] != int64(9000) || a["agent_operator.compaction.tokens_after"] != int64(1200)) {
						t.Errorf("context_compacted attributes %v, want tokens 9000 -> 1200", a)
					}
					if e.GetName() == "turn_limit" && a["agent_operator.round"] != int64(20) {
						t.Errorf("turn_limit attributes %v, want round 20", a)
					}
				}
			}
		},
	}, {
		name: "beyond maxSessions the session with the oldest event is ended",
		tune: func(tr *Tracer) { tr.maxSessions = 2 },
		script: func(t *testing.T, sc *script) {
			a := sc.session("a", uidParent, "")
			b := sc.session("b", uidChild, "")
			c := sc.session("c", uidOther, "")
			a.emit(loop.EventUserInput, loop.EventData{Content: "a"}) // 1
			b.emit(loop.EventUserInput, loop.EventData{Content: "b"}) // 2
			a.emit(loop.EventAssistantTextStart, loop.EventData{})    // 3: b is now the stalest
			c.emit(loop.EventUserInput, loop.EventData{Content: "c"}) // 4
			sc.then(func(tr *Tracer) {
				if n := len(tr.sessions); n != 2 {
					t.Errorf("Tracer follows %d sessions, want 2", n)
				}
				tr.Close()
			})
		},
		check: func(t *testing.T, _ []node, spans []receivedSpan) {
			ends := map[any]time.Time{}
			for _, sp := range spans {
				if sp.GetName() == "invoke_agent" {
					ends[attrMap(sp.GetAttributes())["gen_ai.agent.name"]] = time.Unix(0, int64(sp.GetEndTimeUnixNano())).UTC()
				}
			}
			want := map[any]time.Time{"a": at(3), "b": at(2), "c": at(4)}
			if diff := cmp.Diff(want, ends); diff != "" {
				t.Errorf("input span ends (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "beyond maxOpenTools a tool call gets its span when it ends",
		tune: func(tr *Tracer) { tr.maxOpenTools = 1 },
		script: func(t *testing.T, sc *script) {
			s := sc.session("a", uidParent, "")
			s.emit(loop.EventUserInput, loop.EventData{Content: "go"})                    // 1
			s.emit(loop.EventToolCallStart, loop.EventData{ToolName: "t1", CallID: "c1"}) // 2
			s.emit(loop.EventToolCallStart, loop.EventData{ToolName: "t2", CallID: "c2"}) // 3
			sc.then(func(tr *Tracer) {
				if n := len(tr.sessions[string(uidParent)].tools); n != 1 {
					t.Errorf("%d open tool spans, want 1", n)
				}
			})
			s.emit(loop.EventToolCallEnd, loop.EventData{ToolName: "t2", CallID: "c2", DurationMs: 2000}) // 4
			s.emit(loop.EventToolCallEnd, loop.EventData{ToolName: "t1", CallID: "c1", DurationMs: 3000}) // 5
			s.emit(loop.EventSessionEnd, loop.EventData{State: "IDLE"})                                   // 6
		},
		check: func(t *testing.T, ns []node, _ []receivedSpan) {
			okAt(t, one(t, ns, "execute_tool t1"), at(2), at(5))
			okAt(t, one(t, ns, "execute_tool t2"), at(4).Add(-2*time.Second), at(4))
			if in := one(t, ns, "invoke_agent"); in.Attrs["agent_operator.tool_calls"] != int64(2) {
				t.Errorf("input tool_calls %v, want 2", in.Attrs["agent_operator.tool_calls"])
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := newScript()
			tt.script(t, sc)
			spans, tr := exportWith(t, ProtocolHTTP, sc, tt.tune)
			tt.check(t, nodes(spans), spans)
			for _, n := range nodes(spans) {
				if n.Name != "invoke_agent" && n.Parent != "invoke_agent" {
					t.Errorf("span %q has parent %q, want invoke_agent", n.Name, n.Parent)
				}
				if n.Name == "invoke_agent" && n.Parent != "" {
					t.Errorf("input span has parent %q, want none", n.Parent)
				}
			}
			tr.mu.Lock()
			defer tr.mu.Unlock()
			for key, s := range tr.sessions {
				if s.input != nil {
					t.Errorf("session %s still has an open input span", key)
				}
			}
		})
	}
}

// assertOneTrace checks every span of spans is in the trace of uid.
func assertOneTrace(t *testing.T, spans []receivedSpan, uid types.UID) {
	t.Helper()
	tid := SessionTraceID(uid)
	for _, sp := range spans {
		if !bytes.Equal(sp.GetTraceId(), tid[:]) {
			t.Errorf("span %q in trace %x, want %s", sp.GetName(), sp.GetTraceId(), tid)
		}
	}
}

// TestTracerConcurrentSessions drives sessions from concurrent goroutines,
// as the runner does, and checks each session is a trace of its own with
// the full tree.
func TestTracerConcurrentSessions(t *testing.T) {
	const n = 8
	uids := make([]types.UID, n)
	scripts := make([]*script, n)
	for i := range n {
		uids[i] = types.UID(fmt.Sprintf("6f1c2d3e-0000-4000-8000-1000000000%02d", i))
		sc := newScript()
		s := sc.session(fmt.Sprintf("s%d", i), uids[i], "")
		s.emit(loop.EventUserInput, loop.EventData{Content: "go"})
		s.emit(loop.EventAssistantTextStart, loop.EventData{})
		s.emit(loop.EventAssistantTextEnd, loop.EventData{Usage: &llm.Usage{InputTokens: int64(i + 1)}})
		s.emit(loop.EventToolCallStart, loop.EventData{ToolName: "shell", CallID: "c1"})
		s.emit(loop.EventToolCallEnd, loop.EventData{ToolName: "shell", CallID: "c1"})
		s.emit(loop.EventSessionEnd, loop.EventData{State: "IDLE"})
		scripts[i] = sc
	}
	all := newScript()
	all.then(func(tr *Tracer) {
		var wg sync.WaitGroup
		for _, sc := range scripts {
			wg.Go(func() { sc.play(tr) })
		}
		wg.Wait()
	})
	spans, tr := exportWith(t, ProtocolHTTP, all, nil)
	if len(tr.sessions) != 0 {
		t.Errorf("Tracer still follows %d sessions", len(tr.sessions))
	}
	byTrace := map[string][]receivedSpan{}
	for _, sp := range spans {
		byTrace[string(sp.GetTraceId())] = append(byTrace[string(sp.GetTraceId())], sp)
	}
	for i, uid := range uids {
		tid := SessionTraceID(uid)
		got := nodes(byTrace[string(tid[:])])
		var names []string
		for _, nd := range got {
			names = append(names, nd.Name+"<"+nd.Parent)
			if nd.Attrs["gen_ai.conversation.id"] != string(uid) {
				t.Errorf("session %d: span %q has conversation %v", i, nd.Name, nd.Attrs["gen_ai.conversation.id"])
			}
		}
		want := []string{"invoke_agent<", "chat claude-test<invoke_agent", "execute_tool shell<invoke_agent"}
		if !slices.Equal(names, want) {
			t.Errorf("session %d: spans %v, want %v", i, names, want)
		}
		if len(got) > 0 && got[0].Attrs["gen_ai.usage.input_tokens"] != int64(i+1) {
			t.Errorf("session %d: input tokens %v, want %d", i, got[0].Attrs["gen_ai.usage.input_tokens"], i+1)
		}
	}
}
