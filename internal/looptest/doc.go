// Package looptest is TEST SUPPORT for the agent loop: shared helpers for
// driving loop Sessions in tests (workspaces, scripted turns, event
// recording) and the one definition of the validation matrix of seed 000
// §9.12.
//
// The matrix is parameterised by how a session gets its LLM client:
// internal/loop runs it over the in-memory scripted client, and
// internal/llm/provider runs it over each real adapter against the llmtest
// wire-protocol server of its provider. Only _test.go files may import this
// package. It lives outside internal/loop because the scripted client it
// builds scripts for parses YAML with sigs.k8s.io/yaml, which internal/loop
// and its sub-packages must not depend on.
package looptest
