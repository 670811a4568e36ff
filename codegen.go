// Package agentoperator is the root of the agent-operator module. It holds no code; this file
// declares the code generation of the repository in one place (`go generate .`, or
// `make generate manifests`).
package agentoperator

//go:generate bash hack/generate.sh
