package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// waitForAPIServer blocks until the API server answers /version, pausing
// between attempts from initial doubling up to max. Building the manager
// needs the API server (REST mappings of the cached types); a manager that
// starts while it restarts would otherwise exit and crash-loop, and the
// kubelet's growing back-off would keep sessions waiting long after the API
// server is back.
func waitForAPIServer(ctx context.Context, cfg *rest.Config, log logr.Logger, initial, max time.Duration) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	delay := initial
	for attempt := 1; ; attempt++ {
		_, err := dc.ServerVersion()
		if err == nil {
			return nil
		}
		log.Info("Waiting for the API server", "attempt", attempt, "retryIn", delay, "error", err.Error())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for the API server: %w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, max)
	}
}

// serveWaitingProbes answers the kubelet's probes on addr while the manager
// cannot be built yet: /healthz 200 (the process works; restarting it would
// not bring the API server back), /readyz 503. The returned stop frees addr
// for the manager's own probe server.
func serveWaitingProbes(addr string, log logr.Logger) (stop func()) {
	if addr == "" || addr == "0" {
		return func() {}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Info("Cannot serve probes while waiting for the API server", "address", addr, "error", err.Error())
		return func() {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "waiting for the API server") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "waiting for the API server", http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}
