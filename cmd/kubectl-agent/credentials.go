package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/agent-operator/agent-operator/internal/events"
)

// readerCredential asks the manager in pod, through a port-forward to its
// credentials port, for a NATS credential that reads namespace. The request
// carries the kubeconfig's own credentials (client certificate, bearer token
// or exec plugin), which the manager checks with the API server
// (TokenReview, or the cluster's client CA) before a SubjectAccessReview.
// When the endpoint does not answer the error wraps errNoCredentialEndpoint:
// a manager whose embedded server runs without authentication serves none.
//
// The server certificate is self-signed and not verified: the connection
// goes through the API server's port-forward to the pod managerPod chose, so
// only that pod answers (choose it with --operator-namespace).
func readerCredential(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, port int, namespace string) (*events.ReaderCredential, error) {
	local, stop, err := forwardPort(ctx, cfg, pod, port)
	if err != nil {
		return nil, err
	}
	defer stop()
	client, err := credentialClient(cfg)
	if err != nil {
		return nil, err
	}
	u := fmt.Sprintf("https://127.0.0.1:%d%s?namespace=%s", local, events.CredentialsPath, url.QueryEscape(namespace))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("reader credential: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		// Perhaps no endpoint: a server without authentication needs none.
		return nil, fmt.Errorf("%w: %s/%s port %d: %w", errNoCredentialEndpoint, pod.Namespace, pod.Name, port, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("reader credential: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reader credential for namespace %s: the manager answered %s: %s",
			namespace, resp.Status, strings.TrimSpace(string(body)))
	}
	var cred events.ReaderCredential
	if err := json.Unmarshal(body, &cred); err != nil {
		return nil, fmt.Errorf("reader credential: %w", err)
	}
	return &cred, nil
}

// errNoCredentialEndpoint: the manager's credential endpoint did not answer.
var errNoCredentialEndpoint = errors.New("no reader credential endpoint")

// credentialClient is an HTTP client presenting the kubeconfig's client
// certificate and adding its bearer token (static, file or exec plugin).
func credentialClient(cfg *rest.Config) (*http.Client, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("reader credential: kubeconfig tls: %w", err)
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{}
	}
	tlsCfg.RootCAs, tlsCfg.ServerName = nil, ""
	tlsCfg.InsecureSkipVerify = true //nolint:gosec // see readerCredential: the port-forward picks the server
	rt, err := rest.HTTPWrappersForConfig(cfg, &http.Transport{TLSClientConfig: tlsCfg})
	if err != nil {
		return nil, fmt.Errorf("reader credential: kubeconfig auth: %w", err)
	}
	return &http.Client{Transport: rt}, nil
}
