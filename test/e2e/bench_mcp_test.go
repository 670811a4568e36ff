//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/agent-operator/agent-operator/internal/k8senv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/mcp"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// stdioStarter is what k8senv offers for stdio MCP servers in the workspace.
type stdioStarter interface {
	StartStdio(ctx context.Context, argv []string, env map[string]string, workingDir string) (io.ReadWriteCloser, error)
}

// Issue 22: what an MCP tool call costs next to a built-in one. The same client code the manager
// runs (internal/mcp over the official SDK) calls the test server's echo tool in a workspace
// pod over the persistent exec stream (stdio) and as an in-cluster Service (streamable HTTP);
// read_file on the same pod's stream is the reference. Reported, never asserted.
var _ = Describe("MCP tool call overhead", Label("bench"), func() {
	It("measures an MCP echo call over stdio in the workspace and over streamable HTTP next to read_file", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "bench-mcp")
		const pod = "bench-mcp"
		Expect(f.Client.Create(ctx, executorPod(ns, pod, framework.MCPServerImage))).To(Succeed())
		_, err := f.WaitForPodRunning(ctx, ns, pod, framework.DefaultTimeout)
		Expect(err).NotTo(HaveOccurred())
		url := deployMCPServer(ctx, ns)

		streams, err := k8senv.NewPool(k8senv.Config{REST: f.Config, Client: f.Clientset, Mode: k8senv.Persistent})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(streams.Close)
		env := streams.Env(k8senv.Target{Namespace: ns, Pod: pod, Container: "workspace",
			Expect: k8senv.Expect{Labels: map[string]string{"app": pod}}})
		Expect(env.Initialize(ctx)).To(Succeed())
		content := []byte(strings.Repeat("a line of a small source file\n", 40))
		Expect(env.WriteFile(ctx, "small.txt", content)).To(Succeed())
		var st stdioStarter = env // k8senv runs stdio servers over the pod's stream

		connect := func(s mcp.Server) tool.Executor {
			GinkgoHelper()
			// The Service's rules reach the node a moment after its pod is ready.
			var c *mcp.Conn
			Eventually(func(ctx context.Context) (err error) {
				c, err = mcp.Connect(ctx, s)
				return err
			}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed(), "connect %s", s.Name)
			DeferCleanup(c.Close)
			name := mcp.ToolName(s.Name, "echo")
			for _, t := range c.Tools() {
				if t.Definition.Name == name {
					return t.Executor
				}
			}
			Fail(fmt.Sprintf("server %s offers no %s", s.Name, name))
			return nil
		}
		echo := func(exec tool.Executor) func(context.Context, tool.ExecutionEnvironment) error {
			args, _ := json.Marshal(map[string]string{"text": "ping"})
			return func(ctx context.Context, _ tool.ExecutionEnvironment) error {
				res, err := exec(ctx, &tool.Invocation{Arguments: args})
				if err != nil {
					return err
				}
				if res.IsError || res.Output != "echo: ping" {
					return fmt.Errorf("echo answered %q (error %v)", res.Output, res.IsError)
				}
				return nil
			}
		}
		stdio := connect(mcp.Server{Name: "ws", Command: []string{"/mcpserver", "-stdio"},
			Start: func(ctx context.Context) (io.ReadWriteCloser, error) {
				return st.StartStdio(ctx, []string{"/mcpserver", "-stdio"}, nil, "")
			}})
		remote := connect(mcp.Server{Name: "cluster", URL: url})

		ops := []benchOp{
			{name: "built-in read_file over the persistent stream", call: func(ctx context.Context, env tool.ExecutionEnvironment) error {
				fc, err := env.ReadFile(ctx, "small.txt", tool.ReadOptions{})
				if err == nil && len(fc.Content) != len(content) {
					err = fmt.Errorf("read %d bytes, want %d", len(fc.Content), len(content))
				}
				return err
			}},
			{name: "MCP echo, stdio server in the workspace over the persistent stream", call: echo(stdio)},
			{name: "MCP echo, remote server (streamable HTTP, in-cluster Service)", call: echo(remote)},
		}
		for _, op := range ops {
			lat := latencies(ctx, env, op, benchCalls)
			benchRow(fmt.Sprintf("tool call: %s (%d calls)", op.name, len(lat)),
				fmt.Sprintf("median %s, p99 %s", percentile(lat, 50).Round(time.Microsecond), percentile(lat, 99).Round(time.Microsecond)), "")
		}
	}, SpecTimeout(5*time.Minute))
})
