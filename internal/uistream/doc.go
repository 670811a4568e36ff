// Package uistream turns the events of one AgentSession, as they are read
// back from the journal, into the AI SDK v6 UI message stream: a sequence of
// UIMessageChunk objects (start, start-step, text-*, reasoning-*,
// tool-input-*, tool-output-*, source-url, data-*, finish-step, error,
// finish) served as server-sent events, which the AI SDK's own client
// (readUIMessageStream, useChat) reads as one assistant message.
//
// Converter is the pure mapping; it derives every part id from event seqs,
// so the same journal always yields the same chunks and a client joining
// late, which replays from the journal's start, gets exactly the sequence a
// client watching from the start got. Stream is the http.Handler serving one
// session's chunks, reading events through a Source (JetStream reads them
// with internal/events). docs/events.md, "UI message stream", has the
// mapping table.
package uistream
