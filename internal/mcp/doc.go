// Package mcp connects a session to remote MCP servers (Model Context
// Protocol, streamable HTTP) with the official Go SDK and offers each
// allowed tool of a server to the agentic loop as a tool.Registered named
// mcp__<server>__<tool>. Only the manager talks to the servers: header
// values (credentials) never reach the workspace pod.
package mcp
