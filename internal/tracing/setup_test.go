package tracing

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"
)

// TestSetupFollowsEnvironment checks that Setup exports only when the
// OTEL_* variables ask for it, with the protocol and resource they name,
// and otherwise returns a no-op provider.
func TestSetupFollowsEnvironment(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string // "{endpoint}" is the receiver's endpoint
		receiver string            // protocol the receiver speaks
		export   bool
		service  string
		wantErr  string
	}{
		{name: "no variables", env: map[string]string{}},
		{name: "a protocol alone", env: map[string]string{envProtocol: ProtocolGRPC}},
		{name: "SDK disabled", env: map[string]string{envEndpoint: "{endpoint}", envSDKDisabled: "TRUE"}},
		{name: "traces exporter none", env: map[string]string{envEndpoint: "{endpoint}", envTracesExporter: "none"}},
		{
			name: "endpoint: OTLP/HTTP by default", env: map[string]string{envEndpoint: "{endpoint}"},
			receiver: ProtocolHTTP, export: true, service: ServiceName,
		},
		{
			name: "traces endpoint alone", env: map[string]string{envTracesEndpoint: "{endpoint}/v1/traces", envTracesExporter: "otlp"},
			receiver: ProtocolHTTP, export: true, service: ServiceName,
		},
		{
			name:     "traces protocol overrides the general one",
			env:      map[string]string{envEndpoint: "{endpoint}", envProtocol: ProtocolHTTP, envTracesProtocol: ProtocolGRPC},
			receiver: ProtocolGRPC, export: true, service: ServiceName,
		},
		{
			name: "gzip compression", env: map[string]string{envEndpoint: "{endpoint}", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"},
			receiver: ProtocolHTTP, export: true, service: ServiceName,
		},
		{
			name: "OTEL_SERVICE_NAME overrides the service name", env: map[string]string{envEndpoint: "{endpoint}", "OTEL_SERVICE_NAME": "ops-agents"},
			receiver: ProtocolHTTP, export: true, service: "ops-agents",
		},
		{
			name:     "OTEL_RESOURCE_ATTRIBUTES overrides the service name",
			env:      map[string]string{envEndpoint: "{endpoint}", "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,deployment.environment.name=prod"},
			receiver: ProtocolHTTP, export: true, service: "from-attrs",
		},
		{
			name: "unsupported exporter", env: map[string]string{envEndpoint: "{endpoint}", envTracesExporter: "zipkin"},
			wantErr: "OTEL_TRACES_EXPORTER",
		},
		{
			name: "unsupported protocol", env: map[string]string{envEndpoint: "{endpoint}", envProtocol: "http/json"},
			wantErr: "http/json",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			endpoint := "http://127.0.0.1:1" // nothing listens: a no-op provider never dials
			var r *receiver
			if tt.receiver != "" {
				r, endpoint = startReceiver(t, tt.receiver)
			}
			for k, v := range tt.env {
				t.Setenv(k, strings.ReplaceAll(v, "{endpoint}", endpoint))
			}
			tp, shutdown, err := Setup(t.Context())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Setup error %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			_, span := tp.Tracer("test").Start(t.Context(), "probe")
			recording := span.IsRecording()
			span.End()
			if err := shutdown(t.Context()); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if !tt.export {
				if _, ok := tp.(noop.TracerProvider); !ok || recording {
					t.Errorf("provider %T (recording %v), want the no-op provider", tp, recording)
				}
				return
			}
			if !recording {
				t.Errorf("span of %T not recording", tp)
			}
			got := r.received(t)
			if len(got) != 1 || got[0].GetName() != "probe" {
				t.Fatalf("receiver got %d spans, want the probe", len(got))
			}
			if s := got[0].resource["service.name"]; s != tt.service {
				t.Errorf("service.name %v, want %s", s, tt.service)
			}
		})
	}
}
