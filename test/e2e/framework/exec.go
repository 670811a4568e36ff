package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

// Transport selects the exec stream protocol.
type Transport string

const (
	// TransportDefault is kubectl's wiring: WebSocket first, SPDY when the upgrade fails.
	TransportDefault Transport = "default"
	// TransportWebSocket forces WebSocket (v5.channel.k8s.io) only.
	TransportWebSocket Transport = "websocket"
	// TransportSPDY forces SPDY only.
	TransportSPDY Transport = "spdy"
)

// ExecOptions describes one command run in a container.
type ExecOptions struct {
	Namespace string
	Pod       string
	// Container may be empty for single-container pods.
	Container string
	Command   []string
	// Stdin, when set, is streamed to the command; EOF half-closes the command's stdin.
	Stdin     io.Reader
	Transport Transport
}

// ExecResult is what the command printed and how it exited.
type ExecResult struct {
	Stdout   string
	Stderr   string
	ExitCode int
}

// Exec runs a command in a container without a TTY. A non-zero exit status is reported in
// ExecResult.ExitCode, not as an error; errors are transport or API failures.
// Cancelling ctx ends the stream but not the remote process.
func (f *Framework) Exec(ctx context.Context, o ExecOptions) (ExecResult, error) {
	ex, err := f.executor(o)
	if err != nil {
		return ExecResult{}, err
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: o.Stdin, Stdout: &stdout, Stderr: &stderr})
	res := ExecResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ce utilexec.CodeExitError // a value type: errors.As needs a value target
	if errors.As(err, &ce) {
		res.ExitCode = ce.Code
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("exec %q in %s/%s over %s: %w", o.Command, o.Namespace, o.Pod, transportName(o.Transport), err)
	}
	return res, nil
}

func (f *Framework) executor(o ExecOptions) (remotecommand.Executor, error) {
	u := f.Clientset.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(o.Namespace).Name(o.Pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: o.Container,
			Command:   o.Command,
			Stdin:     o.Stdin != nil,
			Stdout:    true,
			Stderr:    true,
			TTY:       false,
		}, scheme.ParameterCodec).URL()

	switch o.Transport {
	case TransportWebSocket:
		return remotecommand.NewWebSocketExecutor(f.Config, "GET", u.String())
	case TransportSPDY:
		return remotecommand.NewSPDYExecutor(f.Config, "POST", u)
	case TransportDefault, "":
		ws, err := remotecommand.NewWebSocketExecutor(f.Config, "GET", u.String())
		if err != nil {
			return nil, fmt.Errorf("create websocket executor: %w", err)
		}
		spdy, err := remotecommand.NewSPDYExecutor(f.Config, "POST", u)
		if err != nil {
			return nil, fmt.Errorf("create spdy executor: %w", err)
		}
		return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	default:
		return nil, fmt.Errorf("unknown exec transport %q", o.Transport)
	}
}

func transportName(t Transport) Transport {
	if t == "" {
		return TransportDefault
	}
	return t
}
