// Package llm is the unified LLM client layer that seed 000 assumes: the
// provider-neutral Request, Response, Message, ContentPart, ToolDefinition,
// ToolCall, ToolResult, StreamEvent, Usage and FinishReason types, the Client
// interface (Complete and Stream), and typed provider errors.
//
// Adapters over the official provider SDKs live in sub-packages
// (anthropic, openai, gemini) and are selected by name through
// internal/llm/provider. This package itself imports no SDK, so consumers such
// as internal/loop stay light.
package llm
