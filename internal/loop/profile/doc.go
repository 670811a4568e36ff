// Package profile holds the provider profiles of seed 000 §3.4-3.6 (openai,
// anthropic, gemini): each profile's built-in tools, capability flags,
// provider options and system prompt, plus the environment context, git
// snapshot and project instruction discovery of seed 000 §6. A *Profile
// implements loop.Profile. The base prompts are written for this project
// (they cover the topics the spec requires; no vendor prompt is copied).
package profile
