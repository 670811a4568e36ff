// Package gemini is the llm.Client adapter for the Gemini API
// (generateContent and streamGenerateContent), built on the official SDK
// (google.golang.org/genai).
//
// Model parts are echoed verbatim from ContentPart.Raw (thoughtSignature
// included, never merged, split or reordered); function call ids are
// generated when the model sends none and results are matched to calls by
// position; all functionResponse parts of a turn go in one user content in
// call order, wrapped as {"output": …} or {"error": …}. ReasoningEffort
// becomes a thinking level (Gemini 3 and later) or a thinking budget
// (Gemini 2.x), never both; safety settings come from
// ProviderOptions["gemini"]; usage output is candidates + thoughts.
//
// genai's retries stay off (wrap the client in llm.WithRetry; Retry-After is
// read from the error's RetryInfo retryDelay) and the environment is never
// read for the key or base URL: only Config's are used. Stream read failures
// are hidden from genai (which would print them to the global logger) and
// reported by the adapter instead.
package gemini

// maxStreamBytes caps one streamed response body.
const maxStreamBytes = 64 << 20
