// Command kubectl-agent is the kubectl plugin for AgentSessions
// ("kubectl agent"): run a session, read its events (logs, replayed from the
// NATS journal and followed live), steer it, give it follow-up work, abort
// it, and list sessions.
package main
