package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// managerSelector selects the manager pods of the Helm chart and of the
// kustomize manifests in config/.
var managerSelector = labels.SelectorFromSet(labels.Set{
	"app.kubernetes.io/name":      "agent-operator",
	"app.kubernetes.io/component": "manager",
})

// managerPod finds the running, ready manager pod in ns, or in every
// namespace when ns is empty (which must then hold exactly one installation).
func managerPod(ctx context.Context, c client.Reader, ns string) (*corev1.Pod, error) {
	var pods corev1.PodList
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: managerSelector}}
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := c.List(ctx, &pods, opts...); err != nil {
		return nil, fmt.Errorf("list manager pods (%s): %w", managerSelector, err)
	}
	var ready []*corev1.Pod
	namespaces := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(p) {
			continue
		}
		ready = append(ready, p)
		namespaces[p.Namespace] = true
	}
	where := "any namespace"
	if ns != "" {
		where = "namespace " + ns
	}
	switch {
	case len(ready) == 0:
		return nil, fmt.Errorf("find the manager: no running, ready pod labelled %s in %s (set --operator-namespace, or --nats-url for an external NATS)", managerSelector, where)
	case len(namespaces) > 1:
		names := make([]string, 0, len(namespaces))
		for n := range namespaces {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("find the manager: managers run in namespaces %s: choose one with --operator-namespace", strings.Join(names, ", "))
	}
	slices.SortFunc(ready, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return ready[0], nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// forwardPort forwards a free local port on 127.0.0.1 to port of pod through
// the API server, as `kubectl port-forward` does (WebSocket first, SPDY when
// the upgrade fails). It returns the local port and a function that stops
// forwarding.
func forwardPort(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, port int) (uint16, func(), error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, nil, fmt.Errorf("create clientset: %w", err)
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return 0, nil, fmt.Errorf("port-forward: %w", err)
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	tunnel, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, cfg)
	if err != nil {
		return 0, nil, fmt.Errorf("port-forward: %w", err)
	}
	dialer = portforward.NewFallbackDialerForStreaming(tunnel, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return 0, nil, fmt.Errorf("port-forward to %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	stopOnce := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}
	select {
	case <-ready:
	case err := <-done:
		if err == nil {
			err = errors.New("forwarding ended")
		}
		return 0, nil, fmt.Errorf("port-forward to %s/%s: %w", pod.Namespace, pod.Name, err)
	case <-ctx.Done():
		stopOnce()
		return 0, nil, fmt.Errorf("port-forward to %s/%s: %w", pod.Namespace, pod.Name, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		stopOnce()
		return 0, nil, fmt.Errorf("port-forward to %s/%s: local port: %w", pod.Namespace, pod.Name, err)
	}
	return ports[0].Local, stopOnce, nil
}
