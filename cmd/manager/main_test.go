package main

import (
	"strings"
	"testing"

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
			"--nats-store-dir=/var/lib/agent-operator/nats", "--nats-port=4222"}, "", func(t *testing.T, o options) {
			if !o.leaderElect || o.images.PullPolicy != corev1.PullAlways || o.stream.MaxAge.Hours() != 168 || o.natsHost != "127.0.0.1" {
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
		{"bad stream storage", []string{"--stream-storage=tape"}, "stream flags", nil},
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
