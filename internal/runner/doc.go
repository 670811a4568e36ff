// Package runner runs one agent loop (internal/loop.Session) per active
// AgentSession, in a goroutine of the manager.
//
// For each session it resolves the API key from the referenced Secret (the key
// stays in the manager: never in the pod, an event, a log line or status),
// builds the LLM client, the execution environment of the session's workspace
// pod and the provider profile, opens the session's journal (NATS JetStream),
// restores the loop from it when it already has events, and then feeds it the
// prompt and the appended messages exactly once each. Progress (phase, turns,
// tool calls, usage, result, error, last event sequence, delivered messages) is
// kept in memory and announced through Options.Notify, rate-limited, so the
// controller can mirror it into status without polling.
package runner
