package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP trace receiver speaking the real wire protocols:
// OTLP/HTTP (binary protobuf, optionally gzip, at /v1/traces) and OTLP/gRPC
// (the official TraceService). Requests are decoded with the official OTLP
// protobuf types and kept for the test to inspect.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer

	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
	errs []error
}

// startReceiver serves a receiver for protocol until the test ends and
// returns it with the endpoint (OTEL_EXPORTER_OTLP_ENDPOINT) to reach it.
func startReceiver(t *testing.T, protocol string) (*receiver, string) {
	t.Helper()
	r := &receiver{}
	if protocol == ProtocolGRPC {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		srv := grpc.NewServer()
		collectortrace.RegisterTraceServiceServer(srv, r)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		return r, "http://" + lis.Addr().String()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", r.serveHTTP)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

// Export implements the OTLP/gRPC TraceService.
func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// serveHTTP is the OTLP/HTTP traces endpoint for binary protobuf.
func (r *receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	msg, err := decodeHTTP(req)
	if err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if _, err := r.Export(req.Context(), msg); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	body, err := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(body)
}

func decodeHTTP(req *http.Request) (*collectortrace.ExportTraceServiceRequest, error) {
	if req.Method != http.MethodPost {
		return nil, fmt.Errorf("method %s, want POST", req.Method)
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		return nil, fmt.Errorf("content type %q, want application/x-protobuf", ct)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("gunzip body: %w", err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("gunzip body: %w", err)
		}
	}
	msg := &collectortrace.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(body, msg); err != nil {
		return nil, fmt.Errorf("decode ExportTraceServiceRequest: %w", err)
	}
	return msg, nil
}

// received is what the receiver got: every span with its resource's
// attributes.
func (r *receiver) received(t *testing.T) []receivedSpan {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		t.Errorf("receiver rejected a request: %v", err)
	}
	var out []receivedSpan
	for _, req := range r.reqs {
		for _, rs := range req.GetResourceSpans() {
			res := attrMap(rs.GetResource().GetAttributes())
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					out = append(out, receivedSpan{Span: sp, resource: res, scope: ss.GetScope().GetName()})
				}
			}
		}
	}
	return out
}

type receivedSpan struct {
	*tracepb.Span
	resource map[string]any
	scope    string
}

// attrMap turns OTLP attributes into Go values: string, int64, bool,
// float64, or []any for arrays.
func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return m
}

func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, anyValue(e))
		}
		return out
	default:
		return fmt.Sprintf("%v", v)
	}
}
