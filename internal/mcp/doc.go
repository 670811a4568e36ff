// Package mcp connects a session to MCP servers (Model Context Protocol)
// with the official Go SDK and offers each allowed tool of a server to the
// agentic loop as a tool.Registered named mcp__<server>__<tool>. Remote
// servers are reached over streamable HTTP from the manager: header values
// (credentials) never reach the workspace pod. Stdio servers are spoken to
// over a stream the caller starts (Server.Start; the runner runs them in
// the workspace), and a server whose process ended makes its tools fail
// with errors saying how it ended. When a server sends
// notifications/tools/list_changed, Conn.Refresh lists its tools again
// (the loop calls it between turns through loop.WithExtraToolSource); a
// remote server's notifications come on a second session of their own
// (listen.go), so a cut stream never breaks tool calls.
package mcp
