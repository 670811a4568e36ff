package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/render"
)

// globals are the flags shared by all subcommands.
type globals struct {
	kubeconfig  string
	kubeContext string
	namespace   string

	natsURL           string
	natsConn          events.ConnectOptions
	stream            events.StreamConfig
	operatorNamespace string
	natsPort          int
	credentialsPort   int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitError ends the command with a specific exit code (see run).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// exitCode prints err (unless it is a cancellation) and returns the process
// exit code: 0 without an error, the code of an exitError, else 1.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	// Messages may quote the session's status error or a server's answer.
	stderr = render.NewWriter(stderr)
	var ee *exitError
	if errors.As(err, &ee) {
		fmt.Fprintln(stderr, ee.msg)
		return ee.code
	}
	if !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "error:", err)
	}
	return 1
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
	f.StringVar(&g.natsURL, "nats-url", os.Getenv("AGENT_NATS_URL"),
		"NATS server holding the events (env AGENT_NATS_URL); empty reaches the manager's embedded server through a port-forward via the API server")
	f.StringVar(&g.operatorNamespace, "operator-namespace", os.Getenv("AGENT_OPERATOR_NAMESPACE"),
		"namespace of the manager whose embedded NATS to port-forward (env AGENT_OPERATOR_NAMESPACE; default: search every namespace)")
	f.IntVar(&g.natsPort, "nats-port", 4222, "client port of the embedded NATS server in the manager pod")
	f.IntVar(&g.credentialsPort, "reader-credentials-port", 8443,
		"port of the manager's endpoint that gives a read-only NATS credential for a namespace to callers Kubernetes RBAC allows")
	f.StringVar(&g.natsConn.CredsFile, "nats-creds", "", "NATS credentials file")
	f.StringVar(&g.natsConn.NKeySeedFile, "nats-nkey", "", "NATS NKey seed file")
	f.StringVar(&g.natsConn.CAFile, "nats-ca", "", "CA file to verify the NATS server")
	f.StringVar(&g.natsConn.CertFile, "nats-cert", "", "client certificate for NATS")
	f.StringVar(&g.natsConn.KeyFile, "nats-key", "", "client key for NATS")
	f.StringVar(&g.stream.Name, "stream", events.DefaultStreamName, "JetStream stream of the events")
	f.StringVar(&g.stream.Prefix, "subject-prefix", events.DefaultPrefix, "first token of the event subjects")
	root.AddCommand(newLogsCmd(g), newRunCmd(g), newMessageCmd(g, v1alpha1.MessageSteer), newMessageCmd(g, v1alpha1.MessageFollowUp), newAbortCmd(g), newSuspendCmd(g, true), newSuspendCmd(g, false),
		newGetCmd(g), newDiffCmd(g), newCpCmd(g), newUICmd(g))
	return root
}

// clientConfig returns the kubeconfig loader of the flags.
func (g *globals) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: g.kubeContext}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}

// kube returns a client and the effective namespace.
func (g *globals) kube() (client.Client, string, error) {
	cc := g.clientConfig()
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
	if err := errors.Join(v1alpha1.AddToScheme(scheme), corev1.AddToScheme(scheme)); err != nil {
		return nil, "", fmt.Errorf("register api types: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("create kubernetes client: %w", err)
	}
	return c, ns, nil
}

// nats connects to the events server: --nats-url, else the manager's
// embedded server through a port-forward, with a read-only credential for
// namespace that the manager issues after asking Kubernetes RBAC whether
// the kubeconfig's user may get the AgentSessions there (see
// readerCredential). Call the returned function to close the connection
// (and the port-forwards).
func (g *globals) nats(ctx context.Context, namespace string) (*nats.Conn, func(), error) {
	conn := g.natsConn // a copy: the console connects for several namespaces at once
	conn.Name = "kubectl-agent"
	url, stop := g.natsURL, func() {}
	var credErr error
	if url == "" {
		cfg, err := g.clientConfig().ClientConfig()
		if err != nil {
			return nil, nil, fmt.Errorf("load kubeconfig: %w", err)
		}
		c, _, err := g.kube()
		if err != nil {
			return nil, nil, err
		}
		pod, err := managerPod(ctx, c, g.operatorNamespace)
		if err != nil {
			return nil, nil, err
		}
		port, stopForward, err := forwardPort(ctx, cfg, pod, g.natsPort)
		if err != nil {
			return nil, nil, err
		}
		url, stop = fmt.Sprintf("nats://127.0.0.1:%d", port), stopForward
		cred, err := readerCredential(ctx, cfg, pod, g.credentialsPort, namespace)
		switch {
		case errors.Is(err, errNoCredentialEndpoint):
			credErr = err // try without: the server may not require credentials
		case err != nil:
			stop()
			return nil, nil, err
		}
		conn.Reader = cred
	}
	nc, err := events.Connect(ctx, url, conn)
	if err != nil {
		stop()
		return nil, nil, errors.Join(err, credErr)
	}
	return nc, func() { nc.Close(); stop() }, nil
}
