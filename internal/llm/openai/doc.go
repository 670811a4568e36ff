// Package openai holds two llm.Client adapters built on the official SDK
// (github.com/openai/openai-go/v3):
//
//   - Client speaks the OpenAI Responses API, stateless by default
//     (store:false, include reasoning.encrypted_content, every output item
//     echoed verbatim from ContentPart.Raw). Tool results are
//     function_call_output items keyed by call_id.
//   - CompatClient speaks Chat Completions to OpenAI-compatible servers
//     (vLLM, Ollama, LiteLLM, llama.cpp …) at a configurable base URL with
//     no auth or a bearer token: tool calls are assembled by index with
//     generated ids when the server sends none, reasoning_content is read
//     but never sent back, and streams ask for usage.
//
// The SDK's own retries are off (wrap clients in llm.WithRetry) and it never
// reads OPENAI_* from the environment: only Config's key and base URL are
// used. Stream error, response.failed and response.incomplete events become
// errors, and an idle watchdog ends stalled streams.
package openai

// maxStreamBytes caps one streamed response body.
const maxStreamBytes = 64 << 20
