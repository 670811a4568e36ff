// Package loop is the coding agent loop of seed 000: the Session, its
// configuration and states, process_input (LLM call, tool round, steering,
// follow-ups, loop detection, limits), the tool execution pipeline
// (lookup, JSON Schema validation, policy, execute, truncate, emit), the
// event stream, journaling and restore, and in-process subagents.
//
// A Session is driven by a host: Submit runs one input to completion on the
// caller's goroutine while Steer, FollowUp, SetReasoningEffort and Close may
// be called from any goroutine. Events are delivered in order on Events().
//
// The package imports nothing from Kubernetes or NATS; the LLM is reached
// through the small Client interface and tools run in a
// tool.ExecutionEnvironment.
package loop
