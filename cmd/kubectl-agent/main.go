package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
)

// globals are the flags shared by all subcommands.
type globals struct {
	kubeconfig  string
	kubeContext string
	namespace   string

	natsURL  string
	natsConn events.ConnectOptions
	stream   events.StreamConfig
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "kubectl-agent",
		Short:         "Run and watch AgentSessions",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	f := root.PersistentFlags()
	f.StringVar(&g.kubeconfig, "kubeconfig", "", "path to the kubeconfig file")
	f.StringVar(&g.kubeContext, "context", "", "kubeconfig context to use")
	f.StringVarP(&g.namespace, "namespace", "n", "", "namespace (default: the context's namespace)")
	natsDefault := os.Getenv("AGENT_NATS_URL")
	if natsDefault == "" {
		natsDefault = "nats://127.0.0.1:4222"
	}
	f.StringVar(&g.natsURL, "nats-url", natsDefault, "NATS server holding the events (env AGENT_NATS_URL); port-forward the manager's embedded server to use it")
	f.StringVar(&g.natsConn.CredsFile, "nats-creds", "", "NATS credentials file")
	f.StringVar(&g.natsConn.NKeySeedFile, "nats-nkey", "", "NATS NKey seed file")
	f.StringVar(&g.natsConn.CAFile, "nats-ca", "", "CA file to verify the NATS server")
	f.StringVar(&g.natsConn.CertFile, "nats-cert", "", "client certificate for NATS")
	f.StringVar(&g.natsConn.KeyFile, "nats-key", "", "client key for NATS")
	f.StringVar(&g.stream.Name, "stream", events.DefaultStreamName, "JetStream stream of the events")
	f.StringVar(&g.stream.Prefix, "subject-prefix", events.DefaultPrefix, "first token of the event subjects")
	root.AddCommand(newLogsCmd(g), newRunCmd(g), newMessageCmd(g, v1alpha1.MessageSteer), newMessageCmd(g, v1alpha1.MessageFollowUp), newAbortCmd(g), newGetCmd(g))
	return root
}

// kube returns a client and the effective namespace.
func (g *globals) kube() (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: g.kubeContext}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("load kubeconfig: %w", err)
	}
	ns := g.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("load kubeconfig namespace: %w", err)
		}
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, "", fmt.Errorf("register api types: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("create kubernetes client: %w", err)
	}
	return c, ns, nil
}

// nats connects to the events server.
func (g *globals) nats(ctx context.Context) (*nats.Conn, error) {
	g.natsConn.Name = "kubectl-agent"
	return events.Connect(ctx, g.natsURL, g.natsConn)
}
