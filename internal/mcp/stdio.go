package mcp

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// processPipe is the stream of a stdio server's process. It remembers why
// reading ended (the process exited, was stopped, or its stream broke), so
// the errors of the calls that fail because of it can say so.
type processPipe struct {
	rwc io.ReadWriteCloser

	mu      sync.Mutex
	readErr error
	closed  bool
}

func (p *processPipe) Read(b []byte) (int, error) {
	n, err := p.rwc.Read(b)
	if err != nil {
		p.mu.Lock()
		if p.readErr == nil && !p.closed {
			p.readErr = err
		}
		p.mu.Unlock()
	}
	return n, err
}

// Write writes to the process's stdin. When that fails the process stopped
// reading it, most often because it exited: Write then waits (at most
// endWait) for the process's output to end, so that the error of the call
// says how the process ended ("exited with code 2") rather than "broken
// pipe", whichever of the two the process reached first.
func (p *processPipe) Write(b []byte) (int, error) {
	n, err := p.rwc.Write(b)
	if err != nil {
		p.awaitEnd(endWait)
	}
	return n, err
}

// endWait bounds how long a failed write waits for the process's end.
const endWait = 2 * time.Second

// awaitEnd reads what is left of the process's output until its stream ends
// (Read records why) or wait has passed. The reading goroutine ends at the
// stream's end or when the pipe is closed.
func (p *processPipe) awaitEnd(wait time.Duration) {
	p.mu.Lock()
	known := p.readErr != nil || p.closed
	p.mu.Unlock()
	if known {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			if _, err := p.Read(buf); err != nil {
				return
			}
		}
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// Close ends the process; the SDK closes both halves of its transport, so
// it may be called twice.
func (p *processPipe) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	return p.rwc.Close()
}

// explain replaces err (the SDK's view, e.g. "connection closed") with how
// the server's process ended, once it has.
func (p *processPipe) explain(err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.readErr == nil {
		return err
	}
	end := p.readErr
	if errors.Is(end, io.EOF) && end.Error() == io.EOF.Error() {
		return fmt.Errorf("the server's process closed its stdout: %w", err)
	}
	return fmt.Errorf("the server's process has stopped: %w", end)
}

// commandLine renders argv for messages.
func commandLine(argv []string) string {
	if len(argv) == 0 {
		return "(none)"
	}
	return strings.Join(argv, " ")
}
