// Package llmtest is TEST-ONLY: wire-protocol fake servers for the four LLM
// protocols the adapters speak (Anthropic Messages, OpenAI Responses, OpenAI
// Chat Completions, Gemini generateContent/streamGenerateContent), replaying a
// scripted.Script over loopback HTTP and recording every request received.
//
// One Script drives either the in-memory scripted client or a real SDK over
// HTTP: the server decodes each request into an llm.Request (roles, text,
// tool results, reasoning effort), asks a scripted.Client for the turn, and
// encodes the answer (JSON, or SSE exactly as the provider frames it:
// Anthropic with event: lines, Gemini with data: lines only, Responses
// without [DONE], Chat ending with [DONE]). Scripted errors become HTTP
// errors with the provider's error body and Retry-After headers, dropped
// connections, or in-stream error events.
//
// Like the real APIs, the servers reject histories the providers reject
// (unanswered Anthropic tool_use, tool results not first, Responses outputs
// for unknown call_ids, Gemini function calls without their thought
// signature or function responses split across contents), so a passing
// adapter test shows the adapter built an acceptable history.
//
// A turn's webSearch is sent in the provider's server-side search shape
// (Anthropic server_tool_use and web_search_tool_result blocks with
// citations on the text, Responses web_search_call items with url_citation
// annotations, Gemini groundingMetadata), and the provider's search tool
// in a request is decoded into llm.Request.WebSearch, so scripts can expect
// its options and the searches sent back in the history.
//
// ParamsTable pins the request an adapter builds for each of a table of
// loop requests (ParamsCases plus the adapter's own) against golden files,
// byte for byte; run the adapter's tests with -update to rewrite them.
//
// Only tests and test/llmserver import this package.
package llmtest
