package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	corev1 "k8s.io/api/core/v1"
)

func TestParseFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, o options)
	}{
		{"defaults", nil, "", func(t *testing.T, o options) {
			if o.images.Workspace != "agent-operator/workspace:dev" || o.images.Executor != "agent-operator/executor:dev" ||
				o.images.PullPolicy != corev1.PullIfNotPresent || o.natsURL != "" || o.stream.Prefix != "agents" {
				t.Errorf("defaults = %+v", o)
			}
		}},
		{"external nats", []string{"--nats-url=nats://nats:4222", "--nats-creds-file=/etc/nats/user.creds"}, "", func(t *testing.T, o options) {
			if o.natsURL != "nats://nats:4222" || o.natsConn.CredsFile != "/etc/nats/user.creds" {
				t.Errorf("nats = %q %+v", o.natsURL, o.natsConn)
			}
		}},
		{"the chart's arguments", []string{"--leader-elect=true", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
			"--workspace-image=ws:1", "--executor-image=ex:1", "--image-pull-policy=Always", "--stream-name=AGENT_EVENTS",
			"--stream-prefix=agents", "--stream-storage=file", "--stream-max-age=168h", "--stream-max-bytes=0", "--stream-replicas=1",
			"--nats-store-dir=/var/lib/agent-operator/nats", "--nats-port=4222", "--max-concurrent-reconciles=4", "--priority-queue=true"}, "", func(t *testing.T, o options) {
			if o.reconcilers != 4 || !o.leaderElect || o.images.PullPolicy != corev1.PullAlways || o.stream.MaxAge.Hours() != 168 || o.natsHost != "127.0.0.1" {
				t.Errorf("options = %+v", o)
			}
		}},
		{"bad pull policy", []string{"--image-pull-policy=Sometimes"}, "want Always, IfNotPresent or Never", nil},
		{"warm pools", []string{"--warm-pool=ci=4", "--warm-pool=ml=2:ml:v1"}, "", func(t *testing.T, o options) {
			if len(o.warmPools) != 2 || o.warmPools[0].Size != 4 || o.warmPools[1].Namespace != "ml" || o.warmPools[1].Image != "ml:v1" {
				t.Errorf("warm pools = %+v", o.warmPools)
			}
		}},
		{"bad warm pool", []string{"--warm-pool=ci"}, "--warm-pool", nil},
		{"sessions not sharded by default", nil, "", func(t *testing.T, o options) {
			if o.shardSessions || o.replicaLease != 15*time.Second {
				t.Errorf("shardSessions = %t, replicaLease = %s; want off, 15s", o.shardSessions, o.replicaLease)
			}
		}},
		{"sharded with external nats", []string{"--shard-sessions", "--nats-url=nats://nats:4222", "--replica-namespace=ops",
			"--replica-lease-duration=9s"}, "", func(t *testing.T, o options) {
			if !o.shardSessions || o.replicaNamespace != "ops" || o.replicaLease != 9*time.Second {
				t.Errorf("shardSessions = %t, replicaNamespace = %q, replicaLease = %s", o.shardSessions, o.replicaNamespace, o.replicaLease)
			}
		}},
		{"sharding refuses the embedded nats", []string{"--shard-sessions", "--replica-namespace=ops"}, "--shard-sessions needs an external NATS", nil},
		{"sharding needs a namespace", []string{"--shard-sessions", "--nats-url=nats://nats:4222", "--replica-namespace="}, "--replica-namespace", nil},
		{"replica lease too short", []string{"--shard-sessions", "--nats-url=nats://nats:4222", "--replica-namespace=ops",
			"--replica-lease-duration=1s"}, "--replica-lease-duration 1s", nil},
		{"built-in prices", nil, "", func(t *testing.T, o options) {
			if !o.prices.Known("anthropic", "claude-sonnet-4-5") {
				t.Error("the built-in price table is not used by default")
			}
		}},
		{"price file", []string{"--prices-file=" + writeFile(t, "models: [{provider: openai-compatible, model: llama, input: '0', output: '0'}]")}, "", func(t *testing.T, o options) {
			if !o.prices.Known("openai-compatible", "llama") || !o.prices.Known("openai", "gpt-5") {
				t.Error("the price file did not extend the built-in table")
			}
		}},
		{"bad price file", []string{"--prices-file=" + writeFile(t, "models: [{provider: x}]")}, "models[0]: provider and model are required", nil},
		{"missing price file", []string{"--prices-file=/nonexistent/prices.yaml"}, "--prices-file", nil},
		{"bad stream storage", []string{"--stream-storage=tape"}, "stream flags", nil},
		{"concurrent reconciles", []string{"--max-concurrent-reconciles=8"}, "", func(t *testing.T, o options) {
			if o.reconcilers != 8 {
				t.Errorf("reconcilers = %d, want 8", o.reconcilers)
			}
		}},
		{"no reconcilers", []string{"--max-concurrent-reconciles=0"}, "--max-concurrent-reconciles 0", nil},
		{"priority queue on by default", nil, "", func(t *testing.T, o options) {
			if !o.priorityQueue {
				t.Error("priorityQueue = false, want true by default")
			}
		}},
		{"priority queue off", []string{"--priority-queue=false"}, "", func(t *testing.T, o options) {
			if o.priorityQueue {
				t.Error("priorityQueue = true after --priority-queue=false")
			}
		}},
		{"unserved sessions reported after a minute by default", nil, "", func(t *testing.T, o options) {
			if o.reportUnserved != time.Minute {
				t.Errorf("reportUnserved = %s, want 1m", o.reportUnserved)
			}
		}},
		{"unserved reporting disabled", []string{"--report-unserved-after=0"}, "", func(t *testing.T, o options) {
			if o.reportUnserved != 0 {
				t.Errorf("reportUnserved = %s, want 0", o.reportUnserved)
			}
		}},
		{"negative unserved grace", []string{"--report-unserved-after=-1s"}, "--report-unserved-after -1s", nil},
		{"status writes coalesced over 5s by default", nil, "", func(t *testing.T, o options) {
			if o.statusInterval != 5*time.Second {
				t.Errorf("statusInterval = %s, want 5s", o.statusInterval)
			}
		}},
		{"status written at every change", []string{"--status-interval=0"}, "", func(t *testing.T, o options) {
			if o.statusInterval != 0 {
				t.Errorf("statusInterval = %s, want 0", o.statusInterval)
			}
		}},
		{"negative status interval", []string{"--status-interval=-1s"}, "--status-interval -1s", nil},
		{"first statuses by 64 workers of their own by default", nil, "", func(t *testing.T, o options) {
			if o.admissionWorkers != 64 {
				t.Errorf("admissionWorkers = %d, want 64", o.admissionWorkers)
			}
		}},
		{"no admission workers", []string{"--admission-workers=0"}, "", func(t *testing.T, o options) {
			if o.admissionWorkers != 0 {
				t.Errorf("admissionWorkers = %d, want 0", o.admissionWorkers)
			}
		}},
		{"negative admission workers", []string{"--admission-workers=-1"}, "--admission-workers -1", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

func TestWaitForAPIServerWaitsOutAnOutage(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) <= 3 {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major":"1","minor":"36","gitVersion":"v1.36.5"}`)
	}))
	defer srv.Close()
	if err := waitForAPIServer(t.Context(), &rest.Config{Host: srv.URL}, logr.Discard(), time.Millisecond, 5*time.Millisecond); err != nil {
		t.Fatalf("waitForAPIServer: %v", err)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("/version requests = %d, want 3 refused and 1 answered", n)
	}
}

func TestWaitForAPIServerStopsWithItsContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := waitForAPIServer(ctx, &rest.Config{Host: srv.URL}, logr.Discard(), time.Millisecond, 5*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's deadline", err)
	}
}

func TestServeWaitingProbes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop := serveWaitingProbes(addr, logr.Discard())
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
	stop()
	// The manager's own probe server can take the address.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("address not freed: %v", err)
	}
	ln.Close()
}

// writeFile writes content to a file in a test directory and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
