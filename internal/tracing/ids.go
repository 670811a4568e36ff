package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
)

// SessionTraceID is the trace ID of every span of the session with uid: the
// first 16 bytes of the SHA-256 of the UID. Hashing (rather than reusing the
// UUID's bytes) keeps the ID uniformly distributed, which ratio-based
// samplers (OTEL_TRACES_SAMPLER=traceidratio) rely on; a whole session is
// sampled or not.
func SessionTraceID(uid types.UID) trace.TraceID {
	sum := sha256.Sum256([]byte(uid))
	var id trace.TraceID
	copy(id[:], sum[:len(id)])
	return id
}

type traceIDKey struct{}

// withTraceID returns ctx asking the provider built by Setup to give the
// root span started with it the trace ID id.
func withTraceID(ctx context.Context, id trace.TraceID) context.Context {
	return context.WithValue(ctx, traceIDKey{}, id)
}

// idGenerator is the SDK IDGenerator of Setup's provider: random IDs, except
// that a root span takes the trace ID its context carries (withTraceID), so
// that the inputs of one session, each a root span, form one trace, also
// across manager restarts.
type idGenerator struct{}

// NewIDs returns the trace ID ctx carries (a random one without) and a
// random span ID.
func (g idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, ok := ctx.Value(traceIDKey{}).(trace.TraceID)
	for !ok || !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
		ok = true
	}
	return tid, g.NewSpanID(ctx, tid)
}

// NewSpanID returns a random, valid span ID.
func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
