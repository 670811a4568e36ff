// Package anthropic is the llm.Client adapter for the Anthropic Messages API,
// built on the official SDK (github.com/anthropics/anthropic-sdk-go).
//
// It moves system messages to the top-level system prompt, answers every
// tool_use with tool_result blocks placed first in the next user message
// (steering text follows them in the same message), maps ReasoningEffort to
// an extended-thinking budget, echoes thinking blocks verbatim from
// ContentPart.Raw, sets prompt-caching breakpoints on the system prompt, the
// tools and the conversation prefix, and normalises usage (input includes
// cache reads and writes) and stop reasons. The SDK's own retries are off
// (wrap the client in llm.WithRetry) and it never reads ANTHROPIC_* from the
// environment: only Config's key and base URL are used.
package anthropic

// maxStreamBytes caps one streamed response body.
const maxStreamBytes = 64 << 20
