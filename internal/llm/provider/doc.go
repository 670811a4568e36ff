// Package provider builds an llm.Client from a provider name: one of the
// SDK adapters (anthropic, openai, openai-compatible, gemini) or the
// explicitly chosen scripted provider, wrapped in llm.WithRetry. The API key
// is a value passed in; nothing is read from the environment.
package provider
