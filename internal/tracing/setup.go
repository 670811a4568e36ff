package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is the service.name of the exported resource unless
// OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names another.
const ServiceName = "agent-operator"

// The OTEL_* variables Setup decides with. The OTLP exporters read the
// others themselves (headers, timeout, compression, TLS, insecure), and the
// SDK reads the sampler and batch settings (OTEL_TRACES_SAMPLER, OTEL_BSP_*).
const (
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// OTLP protocols (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Setup returns the TracerProvider the standard OTEL_* environment asks for
// and a function that flushes and stops it.
//
// Spans are exported with OTLP only when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, OTEL_SDK_DISABLED is not true
// and OTEL_TRACES_EXPORTER is unset or otlp; otherwise the provider is a
// no-op and shutdown does nothing. The protocol is
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL:
// http/protobuf (the default) or grpc. The resource has service.name
// agent-operator unless the environment names another.
//
// The provider gives the spans of one session one trace (see
// SessionTraceID); with any other provider a Tracer still works, but each
// input of a session is a trace of its own.
func Setup(ctx context.Context) (trace.TracerProvider, func(context.Context) error, error) {
	on, err := enabled()
	if err != nil || !on {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, err
	}
	exp, err := newExporter(ctx)
	if err != nil {
		return nil, nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(ServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, nil, fmt.Errorf("build trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(idGenerator{}),
	)
	shutdown := func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("shut down tracer provider: %w", err)
		}
		return nil
	}
	return tp, shutdown, nil
}

// enabled reports whether the environment asks for OTLP trace export.
func enabled() (bool, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv(envSDKDisabled)), "true") {
		return false, nil
	}
	if v := strings.TrimSpace(os.Getenv(envTracesExporter)); v != "" {
		for name := range strings.SplitSeq(v, ",") {
			switch strings.TrimSpace(name) {
			case "none":
				return false, nil
			case "otlp":
			default:
				return false, fmt.Errorf("%s=%q: only otlp and none are supported", envTracesExporter, v)
			}
		}
	}
	return os.Getenv(envEndpoint) != "" || os.Getenv(envTracesEndpoint) != "", nil
}

// protocol is the OTLP protocol the environment names.
func protocol() (string, error) {
	p := strings.TrimSpace(os.Getenv(envTracesProtocol))
	if p == "" {
		p = strings.TrimSpace(os.Getenv(envProtocol))
	}
	switch p {
	case "", ProtocolHTTP:
		return ProtocolHTTP, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	default:
		return "", fmt.Errorf("OTLP protocol %q: only %s and %s are supported", p, ProtocolHTTP, ProtocolGRPC)
	}
}

// newExporter returns the OTLP exporter for the protocol the environment
// names; it reads its endpoint and options from the environment too.
func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	p, err := protocol()
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if p == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("create OTLP %s trace exporter: %w", p, err)
	}
	return exp, nil
}
