// Package httpx holds the HTTP plumbing shared by the LLM adapters: a
// RoundTripper that watches streamed response bodies for idleness (no SDK
// has a stream idle timeout) and remembers why a body read failed, and that
// removes headers an adapter must never send.
package httpx
