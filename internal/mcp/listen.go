package mcp

import (
	"context"
	"net/http"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Backoff of the notification session's reconnects.
const (
	listenMinBackoff = time.Second
	listenMaxBackoff = time.Minute
)

// listener keeps a second session with a remote server open only to
// receive notifications/tools/list_changed: on the standalone SSE stream
// (an HTTP GET) of protocol versions before 2026-07-28, or the
// subscriptions/listen stream of later ones. The SDK fails a whole
// connection when such a stream breaks (a proxy's idle timeout, a server
// restart), so the Conn's calls and listings never use it. When the
// session ends, the listener connects again (1s doubling to 1 min) and
// marks the tools stale, since a change may have been missed meanwhile. A
// server that offers no stream (405 to the GET) leaves the session open
// and silent: the tools are then never listed again.
type listener struct {
	life   context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	session *sdk.ClientSession
}

// startListener opens the notification session of c (a first attempt
// under ctx, later ones in the background) and returns its listener.
func startListener(ctx context.Context, c *Conn, httpClient *http.Client) *listener {
	life, cancel := context.WithCancel(context.Background())
	l := &listener{life: life, cancel: cancel, done: make(chan struct{})}
	client := sdk.NewClient(clientImpl, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { c.noteListChanged() },
	})
	connect := func(ctx context.Context) *sdk.ClientSession {
		ctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		s, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: c.server.URL, HTTPClient: httpClient, MaxRetries: -1, MaxEventSize: int(c.limit)}, nil)
		if err != nil {
			return nil
		}
		return s
	}
	first := connect(ctx)
	go l.run(first, connect, c.noteListChanged)
	return l
}

// run waits for the session to end and connects again until stop.
func (l *listener) run(s *sdk.ClientSession, connect func(context.Context) *sdk.ClientSession, missed func()) {
	defer close(l.done)
	backoff := listenMinBackoff
	for {
		if s != nil {
			if !l.set(s) {
				_ = s.Close()
				return
			}
			_ = s.Wait()
			backoff = listenMinBackoff
		}
		select {
		case <-l.life.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, listenMaxBackoff)
		if s = connect(l.life); s != nil {
			missed()
		}
	}
}

// set makes s the current session; false when the listener was stopped.
func (l *listener) set(s *sdk.ClientSession) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.life.Err() != nil {
		return false
	}
	l.session = s
	return true
}

// stop closes the session and waits for the listener to end.
func (l *listener) stop() {
	l.mu.Lock()
	l.cancel()
	s := l.session
	l.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
	<-l.done
}
