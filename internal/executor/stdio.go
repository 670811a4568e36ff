package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
)

// OpStdio starts a long-running process whose stdin and stdout are relayed
// over the stream (see the package doc, "Stdio processes").
const OpStdio = "stdio"

// Frame kinds of stdio calls.
const (
	// KindStarted (server to client) says the process of a stdio call runs.
	KindStarted = "started"
	// KindStdout (server to client) carries a chunk of the process's stdout.
	KindStdout = "stdout"
	// KindStdin (client to server) carries a chunk of the process's stdin,
	// or with EOF set closes it.
	KindStdin = "stdin"
)

// DefaultStdioBuffer bounds the stdout a client holds for one stdio process
// that its reader has not read yet. Past it the process is stopped and Read
// fails with ErrStdioOverflow; other calls are not affected.
const DefaultStdioBuffer = 16 << 20

// DefaultStdinQueue bounds the stdin the server holds for one stdio process
// that the process has not read yet (ServeOptions.MaxStdinQueue). Past it
// the process is stopped and its call ends with an error of code
// "too_large".
const DefaultStdinQueue = 16 << 20

// stdioChunk is the largest stdout chunk of one stdout frame.
const stdioChunk = 64 << 10

// stdioDrain bounds how long the server waits for a process's stdout after
// the process exited (a group member may still hold it).
const stdioDrain = time.Second

var (
	// ErrStdioUnsupported is wrapped by StartStdio errors when the executor
	// predates the stdio op (it answers unknown_op).
	ErrStdioUnsupported = errors.New("the workspace executor does not support stdio processes such as stdio MCP servers; update the executor image")
	// ErrStdioOverflow is wrapped by Read errors of a stdio stream whose
	// unread stdout passed the client's buffer.
	ErrStdioOverflow = errors.New("stdio process: too much unread output")
	// ErrStdioClosed is returned by a stdio stream after Close.
	ErrStdioClosed = errors.New("stdio stream closed")
)

// StdioArgs is the body of stdio calls.
type StdioArgs struct {
	// Argv is the command and its arguments (no shell).
	Argv []string `json:"argv"`
	// Env is added to the executor's filtered environment.
	Env map[string]string `json:"env,omitempty"`
	// WorkingDir is resolved under the workspace root (default: the root).
	WorkingDir string `json:"workingDir,omitempty"`
}

// StdioStarted is the body of a started frame.
type StdioStarted struct {
	Pid int `json:"pid"`
}

// StdioResult is the final answer of a stdio call: the body of its result
// frame when the process exited, and of its error frame when it was stopped.
type StdioResult struct {
	ExitCode int    `json:"exitCode"`
	Stderr   string `json:"stderr,omitempty"` // the end of its stderr
}

// WithStdioBuffer sets how much unread stdout the client holds per stdio
// process (default DefaultStdioBuffer).
func WithStdioBuffer(n int) ClientOption { return func(c *Client) { c.stdioBuffer = n } }

// processStarter is the part of the served environment stdio calls need
// (localenv.Env has it).
type processStarter interface {
	StartProcess(ctx context.Context, argv []string, opts localenv.ProcessOptions) (*localenv.Process, error)
}

// runStdio serves one stdio call: it starts the process, relays its stdout
// as stdout frames and the call's stdin frames to its stdin, and answers
// when the process exits, the call is cancelled (the process group is
// stopped) or the process does not read its stdin.
func (s *server) runStdio(ctx context.Context, f *Frame) *Frame {
	var a StdioArgs
	if len(f.Body) > 0 {
		if err := json.Unmarshal(f.Body, &a); err != nil {
			return &Frame{Kind: KindError, Error: wireErrorf(CodeBadRequest, "stdio: decode arguments: %v", err)}
		}
	}
	if len(a.Argv) == 0 || a.Argv[0] == "" {
		return &Frame{Kind: KindError, Error: wireErrorf(CodeBadRequest, "stdio: argv is empty")}
	}
	ps, ok := s.env.(processStarter)
	if !ok {
		return &Frame{Kind: KindError, Error: wireErrorf(CodeUnknownOp, "stdio: this executor's environment cannot run stdio processes")}
	}
	p, err := ps.StartProcess(ctx, a.Argv, localenv.ProcessOptions{WorkingDir: a.WorkingDir, Env: a.Env})
	if err != nil {
		return &Frame{Kind: KindError, Error: toWire(fmt.Errorf("stdio: %w", err))}
	}
	defer p.Close()
	q := s.stdio.add(f.ID)
	limit := q.limit
	defer s.stdio.remove(f.ID)
	go q.feed(p)

	s.send(&Frame{ID: f.ID, Kind: KindStarted, Body: mustJSON(StdioStarted{Pid: p.Pid()})})
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		buf := make([]byte, stdioChunk)
		for {
			n, err := p.Read(buf)
			if n > 0 {
				if s.send(&Frame{ID: f.ID, Kind: KindStdout, Data: bytes.Clone(buf[:n])}) != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	stop := func() StdioResult {
		p.Close()
		<-pumped
		return StdioResult{ExitCode: p.ExitCode(), Stderr: p.Stderr()}
	}
	select {
	case <-p.Done():
		select {
		case <-pumped:
		case <-time.After(stdioDrain):
		}
		return &Frame{Kind: KindResult, Body: mustJSON(stop())}
	case <-ctx.Done():
		res := stop()
		return &Frame{Kind: KindError, Error: toWire(fmt.Errorf("stdio: process %s stopped: %w", a.Argv[0], ctx.Err())), Body: mustJSON(res)}
	case <-q.overflow:
		res := stop()
		return &Frame{Kind: KindError, Error: wireErrorf(CodeTooLarge,
			"stdio: process %s did not read its stdin (more than %d bytes queued) and was stopped", a.Argv[0], limit), Body: mustJSON(res)}
	}
}

// stdioProcs are the stdin queues of a server's running stdio calls.
type stdioProcs struct {
	limit int // unread stdin per process (0: DefaultStdinQueue)

	mu sync.Mutex
	m  map[uint64]*stdinQueue
}

func (ps *stdioProcs) add(id uint64) *stdinQueue {
	limit := ps.limit
	if limit <= 0 {
		limit = DefaultStdinQueue
	}
	q := &stdinQueue{limit: limit, wake: make(chan struct{}, 1), overflow: make(chan struct{}), done: make(chan struct{})}
	ps.mu.Lock()
	if ps.m == nil {
		ps.m = map[uint64]*stdinQueue{}
	}
	ps.m[id] = q
	ps.mu.Unlock()
	return q
}

func (ps *stdioProcs) remove(id uint64) {
	ps.mu.Lock()
	q := ps.m[id]
	delete(ps.m, id)
	ps.mu.Unlock()
	if q != nil {
		close(q.done)
	}
}

// input queues a stdin frame for its process. Frames for a process that has
// already ended are dropped: its call's final answer tells the client.
func (ps *stdioProcs) input(f *Frame) {
	ps.mu.Lock()
	q := ps.m[f.ID]
	ps.mu.Unlock()
	if q != nil {
		q.push(f.Data, f.EOF)
	}
}

// stdinQueue holds stdin for one process until the process reads it.
type stdinQueue struct {
	mu       sync.Mutex
	chunks   [][]byte
	queued   int
	limit    int
	eof      bool
	failed   bool
	wake     chan struct{} // buffered 1
	overflow chan struct{} // closed when more than limit bytes wait
	done     chan struct{} // closed when the call ends
}

func (q *stdinQueue) push(data []byte, eof bool) {
	q.mu.Lock()
	if q.failed || q.eof {
		q.mu.Unlock()
		return
	}
	if len(data) > 0 {
		q.chunks = append(q.chunks, data)
		q.queued += len(data)
	}
	q.eof = eof
	if q.queued > q.limit {
		q.failed = true
		q.chunks, q.queued = nil, 0
		close(q.overflow)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// feed writes the queue to the process's stdin until the call ends, stdin
// is closed or a write fails (the process exited or closed its stdin).
func (q *stdinQueue) feed(p *localenv.Process) {
	for {
		select {
		case <-q.wake:
		case <-q.done:
			return
		}
		for {
			q.mu.Lock()
			if q.failed {
				q.mu.Unlock()
				return
			}
			if len(q.chunks) == 0 {
				eof := q.eof
				q.mu.Unlock()
				if eof {
					_ = p.CloseStdin()
					return
				}
				break
			}
			c := q.chunks[0]
			q.chunks = q.chunks[1:]
			q.queued -= len(c)
			q.mu.Unlock()
			if _, err := p.Write(c); err != nil {
				return
			}
		}
	}
}

// StdioStream is the client's end of a stdio process in the workspace: Read
// reads its stdout, Write writes its stdin, CloseWrite closes its stdin and
// Close stops its process group. Read and Write may be used by one
// goroutine each at a time.
type StdioStream struct {
	c    *Client
	id   uint64
	argv string
	pid  int

	mu      sync.Mutex
	buf     []byte
	err     error         // why reading ends, once known (after buf is drained)
	changed chan struct{} // closed and replaced whenever buf or err changes
	final   chan struct{} // closed when the final frame arrived or the stream broke
	limit   int
}

// StartStdio starts argv in the workspace (env added to the executor's
// filtered environment, workingDir under the workspace root) and returns
// the stream of its stdin and stdout. ctx bounds the start only. An
// executor that predates stdio processes gives an error wrapping
// ErrStdioUnsupported.
func (c *Client) StartStdio(ctx context.Context, argv []string, env map[string]string, workingDir string) (*StdioStream, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("start stdio process: empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start stdio process %s: %w", argv[0], err)
	}
	owner, err := c.callOwner(ctx, OpStdio)
	if err != nil {
		return nil, fmt.Errorf("start stdio process %s: %w", argv[0], err)
	}
	limit := c.stdioBuffer
	if limit <= 0 {
		limit = DefaultStdioBuffer
	}
	s := &StdioStream{c: c, argv: argv[0], changed: make(chan struct{}), final: make(chan struct{}), limit: limit}
	started := make(chan StdioStarted, 1)
	pc := &pendingCall{resp: make(chan *Frame, 1), onFrame: func(f *Frame) {
		switch f.Kind {
		case KindStarted:
			var st StdioStarted
			_ = json.Unmarshal(f.Body, &st)
			select {
			case started <- st:
			default:
			}
		case KindStdout:
			s.stdout(f.Data)
		}
	}}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("start stdio process %s: %w", argv[0], err)
	}
	c.nextID++
	s.id = c.nextID
	c.pending[s.id] = pc
	c.mu.Unlock()

	err = c.write(&Frame{ID: s.id, Kind: KindCall, Op: OpStdio, Body: mustJSON(StdioArgs{Argv: argv, Env: env, WorkingDir: workingDir}), Owner: owner}, c.sendMax)
	if err != nil && !errors.Is(err, ErrFrameTooLarge) {
		c.shutdown(err)
		err = c.Err()
	}
	if err != nil {
		c.forget(s.id)
		return nil, fmt.Errorf("start stdio process %s: %w", argv[0], err)
	}
	var final *Frame
	select {
	case st := <-started:
		s.pid = st.Pid
	case final = <-pc.resp:
		select {
		case st := <-started: // started, then ended at once
			s.pid = st.Pid
		default:
			if final.Kind == KindError && final.Error != nil && final.Error.Code == CodeUnknownOp {
				return nil, fmt.Errorf("start stdio process %s: %w (the executor said: %s)", argv[0], ErrStdioUnsupported, final.Error.Message)
			}
			if final.Kind == KindError {
				return nil, fmt.Errorf("start stdio process %s: %w", argv[0], remoteError(final.Error))
			}
			return nil, fmt.Errorf("start stdio process %s: the executor answered before starting it", argv[0])
		}
	case <-c.done:
		return nil, fmt.Errorf("start stdio process %s: %w", argv[0], c.Err())
	case <-ctx.Done():
		_ = c.write(&Frame{ID: s.id, Kind: KindCancel}, c.sendMax)
		go func() {
			t := time.NewTimer(c.cancelWait)
			defer t.Stop()
			select {
			case <-pc.resp:
			case <-c.done:
			case <-t.C:
				c.forget(s.id)
			}
		}()
		return nil, fmt.Errorf("start stdio process %s: %w", argv[0], ctx.Err())
	}
	go s.watch(pc, final)
	return s, nil
}

// forget drops a call's pending entry.
func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// watch records how the process ended: from its final frame, or the end of
// the stream.
func (s *StdioStream) watch(pc *pendingCall, final *Frame) {
	if final == nil {
		select {
		case final = <-pc.resp:
		case <-s.c.done:
			s.fail(fmt.Errorf("stdio process %s: %w", s.argv, s.c.Err()))
			close(s.final)
			return
		}
	}
	var res StdioResult
	if len(final.Body) > 0 {
		_ = json.Unmarshal(final.Body, &res)
	}
	if final.Kind == KindError {
		s.fail(&StdioExitError{Command: s.argv, ExitCode: res.ExitCode, Stderr: res.Stderr, cause: remoteError(final.Error)})
	} else {
		s.fail(&StdioExitError{Command: s.argv, ExitCode: res.ExitCode, Stderr: res.Stderr})
	}
	close(s.final)
}

// StdioExitError is the Read error of a stdio stream whose process ended.
// It unwraps to io.EOF when the process exited by itself with code 0, and
// to the executor's error when it was stopped.
type StdioExitError struct {
	Command  string
	ExitCode int
	Stderr   string // the end of its stderr
	cause    error
}

func (e *StdioExitError) Error() string {
	var b strings.Builder
	if e.cause != nil {
		fmt.Fprintf(&b, "process %s ended: %v", e.Command, e.cause)
	} else {
		fmt.Fprintf(&b, "process %s exited with code %d", e.Command, e.ExitCode)
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		fmt.Fprintf(&b, "; its stderr ends with: %s", s)
	}
	return b.String()
}

// Unwrap returns the cause, or io.EOF after a clean exit.
func (e *StdioExitError) Unwrap() error {
	if e.cause != nil {
		return e.cause
	}
	if e.ExitCode == 0 {
		return io.EOF
	}
	return nil
}

// stdout appends a chunk of output; called by the client's read loop, so it
// never blocks. Past the limit the process is stopped.
func (s *StdioStream) stdout(data []byte) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	if len(s.buf)+len(data) > s.limit {
		s.buf = nil
		s.err = fmt.Errorf("%w: process %s wrote more than %d bytes nobody read; it was stopped", ErrStdioOverflow, s.argv, s.limit)
		s.notifyLocked()
		s.mu.Unlock()
		go func() { _ = s.c.write(&Frame{ID: s.id, Kind: KindCancel}, s.c.sendMax) }()
		return
	}
	s.buf = append(s.buf, data...)
	s.notifyLocked()
	s.mu.Unlock()
}

// fail sets the error reading ends with, unless one is set.
func (s *StdioStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
		s.notifyLocked()
	}
	s.mu.Unlock()
}

func (s *StdioStream) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Pid returns the process's id in the workspace.
func (s *StdioStream) Pid() int { return s.pid }

// Read reads the process's stdout. Once the process has ended and its
// output is read, it returns a *StdioExitError (io.EOF through errors.Is
// after a clean exit), ErrStdioOverflow, ErrStdioClosed or ErrStreamClosed.
func (s *StdioStream) Read(b []byte) (int, error) {
	for {
		s.mu.Lock()
		if len(s.buf) > 0 && !errors.Is(s.err, ErrStdioOverflow) && !errors.Is(s.err, ErrStdioClosed) {
			n := copy(b, s.buf)
			s.buf = s.buf[n:]
			if len(s.buf) == 0 {
				s.buf = nil
			}
			s.mu.Unlock()
			return n, nil
		}
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return 0, err
		}
		ch := s.changed
		s.mu.Unlock()
		<-ch
	}
}

// Write sends p to the process's stdin. It fails once the process has ended.
func (s *StdioStream) Write(p []byte) (int, error) {
	chunk := min(max(s.c.sendMax/2, 1024), 1<<20) // room for base64 and the frame
	written := 0
	for written < len(p) || len(p) == 0 {
		if err := s.ended(); err != nil {
			return written, err
		}
		end := min(written+chunk, len(p))
		if err := s.send(&Frame{ID: s.id, Kind: KindStdin, Data: p[written:end]}); err != nil {
			return written, err
		}
		written = end
		if len(p) == 0 {
			break
		}
	}
	return written, nil
}

// CloseWrite closes the process's stdin.
func (s *StdioStream) CloseWrite() error {
	if err := s.ended(); err != nil {
		return err
	}
	return s.send(&Frame{ID: s.id, Kind: KindStdin, EOF: true})
}

func (s *StdioStream) send(f *Frame) error {
	err := s.c.write(f, s.c.sendMax)
	if err != nil && !errors.Is(err, ErrFrameTooLarge) {
		s.c.shutdown(err)
		return fmt.Errorf("stdio process %s: %w", s.argv, s.c.Err())
	}
	if err != nil {
		return fmt.Errorf("stdio process %s: %w", s.argv, err)
	}
	return nil
}

// ended returns an error when the process can take no more input.
func (s *StdioStream) ended() error {
	select {
	case <-s.final:
	default:
		s.mu.Lock()
		defer s.mu.Unlock()
		if errors.Is(s.err, ErrStdioClosed) || errors.Is(s.err, ErrStdioOverflow) {
			return s.err
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Errorf("write stdin: %w", s.err)
}

// Close stops the process group (SIGTERM, then SIGKILL after the
// executor's grace period) unless it has ended, and waits up to the
// client's cancel wait for the executor to confirm. Reads and writes then
// fail with ErrStdioClosed.
func (s *StdioStream) Close() error {
	s.mu.Lock()
	if s.err == nil {
		s.err = ErrStdioClosed
		s.buf = nil
		s.notifyLocked()
	}
	s.mu.Unlock()
	select {
	case <-s.final:
		return nil
	default:
	}
	_ = s.c.write(&Frame{ID: s.id, Kind: KindCancel}, s.c.sendMax)
	t := time.NewTimer(s.c.cancelWait)
	defer t.Stop()
	select {
	case <-s.final:
	case <-t.C:
		s.c.forget(s.id)
	}
	return nil
}
