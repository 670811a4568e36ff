// Package scripted is the `scripted` provider: an llm.Client that replays
// model turns from a Script instead of calling a model. It exists for demos,
// CI dry runs without API keys, and tests. It is never a default: a session
// uses it only when its spec names the scripted provider explicitly.
//
// The client is stateless. The turn it answers with is chosen by counting the
// assistant messages already present in the request, so a conversation
// restored from a journal, or several subagents sharing one client, each get
// the right turn. A conversation is matched to one of the Script's agents by
// its first user message (see Agent.Match); the default turns answer the rest.
package scripted
