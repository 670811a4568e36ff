// Package tool holds the contracts that tools are written against: the
// ExecutionEnvironment of seed 000 §4 (where tools run), tool definitions,
// the executor signature, the Registry, and the SubagentSpawner used by the
// subagent tools. It imports nothing from Kubernetes or NATS.
package tool
