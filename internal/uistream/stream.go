package uistream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// HeaderName and HeaderValue mark a response as an AI SDK UI message
// stream (ai's uiMessageStreamHeaders).
const (
	HeaderName  = "x-vercel-ai-ui-message-stream"
	HeaderValue = "v1"
)

// Source reads the events of a session in seq order from seq 1.
type Source interface {
	// Replay returns the journal up to its last event at call time.
	Replay(ctx context.Context, session events.SessionRef) ([]loop.Event, error)
	// Follow calls fn with every event, the journal then live ones, until
	// ctx ends or fn returns an error (events.ErrStop ends it with nil).
	Follow(ctx context.Context, session events.SessionRef, fn func(loop.Event) error) error
}

// JetStream is the Source of the journal in NATS JetStream.
type JetStream struct {
	JS      jetstream.JetStream
	Options []events.ReadOption
}

// Replay reads the journal with events.Replay.
func (s JetStream) Replay(ctx context.Context, session events.SessionRef) ([]loop.Event, error) {
	return events.Replay(ctx, s.JS, session, s.Options...)
}

// Follow reads the journal and then live events with events.Follow.
func (s JetStream) Follow(ctx context.Context, session events.SessionRef, fn func(loop.Event) error) error {
	return events.Follow(ctx, s.JS, session, 1, fn, s.Options...)
}

// DefaultKeepAlive is the interval of keep-alive comments on a live stream.
const DefaultKeepAlive = 15 * time.Second

// Stream is the http.Handler serving one session's events as an AI SDK UI
// message stream over server-sent events: one "data: <chunk JSON>\n\n" per
// chunk, always from the journal's start, then "data: [DONE]\n\n" when the
// message is finished. Without Live the message is finished at the end of
// the journal as it is when the request comes; with Live it goes on with
// live events and is finished when the loop closes (SESSION_END with state
// CLOSED); a client that leaves earlier just ends the response.
type Stream struct {
	Source  Source
	Session events.SessionRef
	Live    bool
	// KeepAlive is the interval of SSE comments keeping an idle live
	// stream open through proxies (DefaultKeepAlive when 0, none when
	// negative).
	KeepAlive time.Duration
}

// ServeHTTP writes the stream. A journal that cannot be read before the
// first chunk is a 502; a read error later becomes an error chunk, then the
// message is finished.
func (s Stream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	ctx := r.Context()
	var initial []loop.Event
	if !s.Live {
		var err error
		if initial, err = s.Source.Replay(ctx, s.Session); err != nil {
			http.Error(w, fmt.Sprintf("read the journal of %s: %v", s.Session, err), http.StatusBadGateway)
			return
		}
	}
	sw := newSSEWriter(w)
	sw.header()
	if r.Method == http.MethodHead {
		return
	}
	conv := NewConverter(s.Session.UID)
	if !s.Live {
		for _, ev := range initial {
			if sw.chunks(conv.Event(ev)) != nil {
				return
			}
		}
		if sw.chunks(conv.Finish()) == nil {
			_ = sw.done()
		}
		return
	}
	if ka := s.keepAlive(); ka > 0 {
		stop := sw.keepAlive(ka)
		defer stop()
	}
	err := s.Source.Follow(ctx, s.Session, func(ev loop.Event) error {
		if err := sw.chunks(conv.Event(ev)); err != nil {
			return err
		}
		if ev.Kind == loop.EventSessionEnd && ev.Data.State == string(loop.StateClosed) {
			return events.ErrStop
		}
		return nil
	})
	switch {
	case ctx.Err() != nil || errors.Is(err, errWrite):
		return // the client left
	case err != nil:
		if sw.chunks([]Chunk{{Type: TypeError, ErrorText: fmt.Sprintf("read the journal of %s: %v", s.Session, err)}}) != nil {
			return
		}
	}
	if sw.chunks(conv.Finish()) == nil {
		_ = sw.done()
	}
}

func (s Stream) keepAlive() time.Duration {
	if s.KeepAlive == 0 {
		return DefaultKeepAlive
	}
	return s.KeepAlive
}

// errWrite: the response could not be written (the client left).
var errWrite = errors.New("write the stream")

// sseWriter writes SSE frames; a keep-alive goroutine may write too.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher *http.ResponseController
	err     error
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, flusher: http.NewResponseController(w)}
}

// header writes and flushes the headers of ai's uiMessageStreamHeaders, so
// a live client is connected before the first event.
func (s *sseWriter) header() {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set(HeaderName, HeaderValue)
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	_ = s.flusher.Flush()
}

// chunks writes one frame per chunk and flushes.
func (s *sseWriter) chunks(cs []Chunk) error {
	if len(cs) == 0 {
		return nil
	}
	buf := make([]byte, 0, 256*len(cs))
	for _, c := range cs {
		b, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("%w: %w", errWrite, err)
		}
		buf = append(buf, "data: "...)
		buf = append(buf, b...)
		buf = append(buf, "\n\n"...)
	}
	return s.write(buf)
}

// done writes the terminating frame.
func (s *sseWriter) done() error { return s.write([]byte("data: [DONE]\n\n")) }

func (s *sseWriter) write(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if _, err := s.w.Write(b); err != nil {
		s.err = fmt.Errorf("%w: %w", errWrite, err)
		return s.err
	}
	if err := s.flusher.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = fmt.Errorf("%w: %w", errWrite, err)
	}
	return s.err
}

// keepAlive writes an SSE comment every d until the returned stop is called.
func (s *sseWriter) keepAlive(d time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if s.write([]byte(": keep-alive\n\n")) != nil {
					return
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
