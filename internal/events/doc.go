// Package events publishes loop events to NATS JetStream and reads them back.
//
// The stream of a session is also its journal (seed 002 FR-RES-04): Journal
// implements loop.Journal, Replay rebuilds the ordered event list of a session
// and Follow replays then follows it live. Every event is wrapped in a
// versioned JSON Envelope and published on the subject
//
//	agents.<namespace>.<session-token>.<kind-lowercase>
//
// where the session token is the object name with '.' mapped to '_'. Events
// too large for one NATS message are stored in an Object Store bucket and the
// stream keeps a reference. A Redactor removes known secret values and
// KEY=value secrets from every event before it leaves the process.
//
// StartEmbedded runs an in-process nats-server with JetStream for development
// and tests; Connect dials an external server. docs/events.md documents the
// wire format for consumers such as the nats CLI.
package events
