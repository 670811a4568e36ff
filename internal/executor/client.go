package executor

import (
	"bufio"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// ErrStreamClosed is wrapped by errors of calls that could not complete
// because the stream broke or the client was closed. Such calls are never
// re-sent: the caller decides whether repeating them is safe.
var ErrStreamClosed = errors.New("executor stream closed")

// DefaultCancelWait bounds how long a cancelled call waits for the server's
// final answer (an exec's partial output arrives after the 2 s kill grace).
const DefaultCancelWait = 5 * time.Second

// DefaultStallTimeout bounds how long a frame may stay half-received. The
// peer writes each frame whole, so a frame that stops arriving midway means
// bytes that are not the peer's (e.g. a forged length prefix) are holding the
// reader; the stream is then failed as corrupt rather than left waiting.
const DefaultStallTimeout = 30 * time.Second

// DefaultStreamLimit is how many bytes of a command's streamed output
// (tool.ExecOptions.OnOutput) a client asks for at most per call: past it the
// server sends no more output frames (FeatureStreamLimit) and the client
// forwards no more. It is above what the shell tool streams (1 MiB), so that
// consumer still sees the output run past its own cap and says so.
const DefaultStreamLimit = 1<<20 + 64<<10

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithMaxFrame sets the frame limit of the client (default DefaultMaxFrame);
// requests are also kept under the server's announced limit.
func WithMaxFrame(n int) ClientOption { return func(c *Client) { c.max = n } }

// WithCancelWait sets how long a cancelled call waits for the final answer
// (default DefaultCancelWait).
func WithCancelWait(d time.Duration) ClientOption { return func(c *Client) { c.cancelWait = d } }

// WithStallTimeout sets how long a frame may stay half-received before the
// stream is failed as corrupt (default DefaultStallTimeout).
func WithStallTimeout(d time.Duration) ClientOption { return func(c *Client) { c.stallTimeout = d } }

// WithStreamLimit sets how many bytes of a command's streamed output one
// ExecCommand call receives at most (default DefaultStreamLimit); 0 or less
// means no limit.
func WithStreamLimit(n int64) ClientOption { return func(c *Client) { c.streamLimit = n } }

// WithOwner makes the stream present o in its hello: the executor then
// refuses the stream's hello and calls (ErrNotOwner) once a newer driver of
// o's session has used the workspace. A zero Owner leaves the stream
// unchecked.
func WithOwner(o Owner) ClientOption {
	return func(c *Client) {
		if o.IsZero() {
			c.owner = nil
			return
		}
		c.owner = &o
	}
}

// Client is a tool.ExecutionEnvironment over a protocol stream. It is safe
// for concurrent use; calls are multiplexed over the one stream.
type Client struct {
	rw         io.ReadWriteCloser
	max        int
	sendMax    int
	cancelWait time.Duration
	hello      Hello
	owner      *Owner // presented in the hello; nil: unchecked

	streamLimit int64 // most streamed output bytes per exec call; <= 0: none

	stdioBuffer int // unread stdout held per stdio process (stdio.go)

	stallTimeout time.Duration
	progress     progressReader // rw, watched for stalls
	// br reads ahead of progress (up to maxKeptBuffer bytes): what the
	// handshake and then readLoop read.
	br *bufio.Reader

	wmu sync.Mutex
	out *sealer // under wmu; nil until the handshake is done

	in *opener // used by the handshake, then by readLoop alone

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*pendingCall
	err     error // set once the stream is closed
	done    chan struct{}
}

var _ tool.ExecutionEnvironment = (*Client)(nil)

type pendingCall struct {
	resp     chan *Frame // buffered 1
	onOutput func([]byte)
	onFrame  func(*Frame) // stdout and started frames of a stdio call (stdio.go)
}

// NewClient performs the handshake over rw and returns a client. The client
// owns rw and closes it on Close or when the stream breaks.
func NewClient(rw io.ReadWriteCloser, opts ...ClientOption) (*Client, error) {
	return NewClientContext(context.Background(), rw, opts...)
}

// NewClientContext is NewClient with a context bounding the handshake
// (rw is closed when ctx ends before the server answered).
func NewClientContext(ctx context.Context, rw io.ReadWriteCloser, opts ...ClientOption) (*Client, error) {
	c := &Client{
		rw:           rw,
		max:          DefaultMaxFrame,
		cancelWait:   DefaultCancelWait,
		stallTimeout: DefaultStallTimeout,
		streamLimit:  DefaultStreamLimit,
		pending:      map[uint64]*pendingCall{},
		done:         make(chan struct{}),
	}
	for _, o := range opts {
		o(c)
	}
	c.progress.r = rw
	c.br = bufio.NewReaderSize(&c.progress, maxKeptBuffer)
	stop := context.AfterFunc(ctx, func() { rw.Close() })
	defer stop()
	h, err := c.handshake()
	if err != nil {
		rw.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("executor handshake: %w", ctx.Err())
		}
		return nil, err
	}
	c.hello = h
	c.sendMax = c.max
	if h.MaxFrame > 0 && h.MaxFrame < c.sendMax {
		c.sendMax = h.MaxFrame
	}
	go c.readLoop()
	go c.watchStalls()
	return c, nil
}

// handshake sends the client's hello with a fresh stream key, checks the
// server's answer (its version and its proof of the key) and then switches
// both directions to authenticated frames. The key exists only in this
// client and in the server process; it is never logged or stored elsewhere.
func (c *Client) handshake() (Hello, error) {
	if c.owner != nil {
		if err := c.owner.Validate(); err != nil {
			return Hello{}, fmt.Errorf("executor handshake: %w", err)
		}
	}
	key, err := newStreamKey()
	if err != nil {
		return Hello{}, fmt.Errorf("executor handshake: %w", err)
	}
	if err := c.write(&Frame{Kind: KindHello, Body: mustJSON(clientHello{Hello: Hello{Version: Version, MaxFrame: c.max}, Key: key, Owner: c.owner})}, c.max); err != nil {
		return Hello{}, fmt.Errorf("executor handshake: %w", err)
	}
	f, err := ReadFrame(c.br, c.max)
	if err != nil {
		return Hello{}, fmt.Errorf("executor handshake: %w", err)
	}
	if f.Kind == KindError {
		return Hello{}, fmt.Errorf("executor handshake: %w", remoteError(f.Error))
	}
	if f.Kind != KindHello {
		return Hello{}, fmt.Errorf("executor handshake: expected hello, got %s frame", f.Kind)
	}
	var h serverHello
	if err := json.Unmarshal(f.Body, &h); err != nil {
		return Hello{}, fmt.Errorf("executor handshake: decode hello: %w", err)
	}
	if h.Version != Version {
		return Hello{}, fmt.Errorf("executor handshake: server speaks protocol version %d, want %d", h.Version, Version)
	}
	if !hmac.Equal(h.Proof, helloProof(key, h.Hello)) {
		return Hello{}, fmt.Errorf("executor handshake: %w: the server's hello does not prove the stream key", ErrFrameAuth)
	}
	if len(h.Features) > 0 && !hmac.Equal(h.FeaturesProof, featuresProof(key, h.Features)) {
		return Hello{}, fmt.Errorf("executor handshake: %w: the server's features are not proven with the stream key", ErrFrameAuth)
	}
	c.wmu.Lock()
	c.out = &sealer{key: key, dir: clientToServer}
	c.wmu.Unlock()
	c.in = &opener{key: key, dir: serverToClient}
	return h.Hello, nil
}

func (c *Client) readLoop() {
	for {
		c.progress.expectFrame(c.br.Buffered())
		f, err := c.in.next(c.br, c.max)
		c.progress.frameDone()
		if err != nil {
			if recoverable(err) {
				// A frame we cannot use; its call (if any) will be failed
				// when the stream ends or by its own context.
				var id uint64
				if f != nil {
					id = f.ID
				}
				if id != 0 {
					c.deliver(&Frame{ID: id, Kind: KindError, Error: toWire(err)})
				}
				continue
			}
			c.shutdown(err)
			return
		}
		switch f.Kind {
		case KindOutput:
			c.mu.Lock()
			pc := c.pending[f.ID]
			c.mu.Unlock()
			if pc != nil && pc.onOutput != nil {
				pc.onOutput(f.Data)
			}
		case KindStdout, KindStarted:
			c.mu.Lock()
			pc := c.pending[f.ID]
			c.mu.Unlock()
			if pc != nil && pc.onFrame != nil {
				pc.onFrame(f)
			}
		case KindResult, KindError:
			if f.ID != 0 {
				c.deliver(f)
			}
		}
	}
}

// watchStalls fails the stream when a frame stays half-received for longer
// than the stall timeout.
func (c *Client) watchStalls() {
	t := time.NewTicker(max(c.stallTimeout/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			if since, ok := c.progress.stalled(now); ok && since >= c.stallTimeout {
				c.shutdown(fmt.Errorf("%w: a frame stopped arriving midway for %s", ErrFrameAuth, since.Round(time.Millisecond)))
				return
			}
		}
	}
}

// progressReader tracks whether a frame is half-received and since when
// nothing arrived. It sits under the client's read-ahead, so it sees bytes
// when they arrive from the stream, not when readLoop consumes them.
type progressReader struct {
	r   io.Reader
	now func() time.Time // time.Now; tests set their own clock

	mu      sync.Mutex
	inFrame bool // some bytes of the current frame have arrived
	waiting bool // readLoop is reading a frame
	last    time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.mu.Lock()
		if p.waiting {
			p.inFrame = true
		}
		p.last = p.clock()
		p.mu.Unlock()
	}
	return n, err
}

func (p *progressReader) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// expectFrame says readLoop starts reading a frame, with buffered bytes of
// the stream already read ahead. Those are the start of this frame, so it is
// half-received from now on until it completes: bytes that arrived with an
// earlier frame (a short injection after a genuine frame) cannot hide a
// stall by sitting in the read-ahead buffer.
func (p *progressReader) expectFrame(buffered int) {
	p.mu.Lock()
	p.waiting, p.inFrame = true, buffered > 0
	if buffered > 0 {
		p.last = p.clock()
	}
	p.mu.Unlock()
}

func (p *progressReader) frameDone() {
	p.mu.Lock()
	p.waiting, p.inFrame = false, false
	p.mu.Unlock()
}

// stalled reports how long a half-received frame has seen no bytes.
func (p *progressReader) stalled(now time.Time) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.inFrame {
		return 0, false
	}
	return now.Sub(p.last), true
}

func (c *Client) deliver(f *Frame) {
	c.mu.Lock()
	pc := c.pending[f.ID]
	delete(c.pending, f.ID)
	c.mu.Unlock()
	if pc != nil {
		pc.resp <- f
	}
}

// shutdown closes the stream once and fails every call in flight.
func (c *Client) shutdown(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	switch {
	case cause == nil || errors.Is(cause, io.EOF):
		c.err = ErrStreamClosed
	case errors.Is(cause, ErrFrameAuth):
		c.err = fmt.Errorf("%w: %w", ErrStreamClosed, cause)
	default:
		c.err = fmt.Errorf("%w: %v", ErrStreamClosed, cause)
	}
	c.pending = map[uint64]*pendingCall{}
	close(c.done)
	c.mu.Unlock()
	c.rw.Close()
}

// Close closes the stream; calls in flight fail with ErrStreamClosed.
func (c *Client) Close() error {
	c.shutdown(nil)
	return nil
}

// Done is closed when the stream has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the stream ended, or nil while it is open.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// write encodes f (sealed once the handshake is done) and writes it; frames
// are encoded and written under one lock so they reach the stream in the
// order of their sequence numbers.
func (c *Client) write(f *Frame, max int) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.out.send(c.rw, f, max)
}

// do sends one call and waits for its answer, decoding a result into out.
// On ctx end it sends a cancel frame and waits up to cancelWait for the final
// answer, whose body (if any) is decoded into out; the error then wraps
// ctx.Err().
func (c *Client) do(ctx context.Context, op string, args, out any, onOutput func([]byte)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	owner, err := c.callOwner(ctx, op)
	if err != nil {
		return err
	}
	pc := &pendingCall{resp: make(chan *Frame, 1), onOutput: onOutput}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", op, err)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = pc
	c.mu.Unlock()

	err = c.write(&Frame{ID: id, Kind: KindCall, Op: op, Body: mustJSON(args), Owner: owner}, c.sendMax)
	if err != nil && !errors.Is(err, ErrFrameTooLarge) {
		c.shutdown(err)
		err = c.Err()
	}
	if err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		if errors.Is(err, ErrFrameTooLarge) {
			return fmt.Errorf("%s: request refused: %w", op, err)
		}
		return fmt.Errorf("%s: %w", op, err)
	}

	var f *Frame
	select {
	case f = <-pc.resp:
	case <-c.done:
		return fmt.Errorf("%s: request %d was in flight: %w", op, id, c.Err())
	case <-ctx.Done():
		_ = c.write(&Frame{ID: id, Kind: KindCancel}, c.sendMax)
		t := time.NewTimer(c.cancelWait)
		defer t.Stop()
		select {
		case f = <-pc.resp:
			if len(f.Body) > 0 && out != nil {
				_ = json.Unmarshal(f.Body, out)
			}
		case <-c.done:
		case <-t.C:
			c.mu.Lock()
			delete(c.pending, id)
			c.mu.Unlock()
		}
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	if f.Kind == KindError {
		if len(f.Body) > 0 && out != nil {
			_ = json.Unmarshal(f.Body, out)
		}
		return fmt.Errorf("%s: %w", op, remoteError(f.Error))
	}
	if out != nil {
		if err := json.Unmarshal(f.Body, out); err != nil {
			return fmt.Errorf("%s: decode result: %w", op, err)
		}
	}
	return nil
}

// ReadFile implements tool.ExecutionEnvironment.
func (c *Client) ReadFile(ctx context.Context, path string, opts tool.ReadOptions) (*tool.FileContent, error) {
	var fc FileContent
	if err := c.do(ctx, OpReadFile, ReadArgs{Path: path, Offset: opts.Offset, Limit: opts.Limit, MaxBytes: opts.MaxBytes}, &fc, nil); err != nil {
		return nil, err
	}
	if fc.Content == nil {
		fc.Content = []byte{}
	}
	return &tool.FileContent{Content: fc.Content, TotalLines: fc.TotalLines, Size: fc.Size, Binary: fc.Binary, MediaType: fc.MediaType}, nil
}

// WriteFile implements tool.ExecutionEnvironment.
func (c *Client) WriteFile(ctx context.Context, path string, content []byte) error {
	return c.do(ctx, OpWriteFile, PathArgs{Path: path, Content: content}, nil, nil)
}

// DeleteFile implements tool.ExecutionEnvironment.
func (c *Client) DeleteFile(ctx context.Context, path string) error {
	return c.do(ctx, OpDeleteFile, PathArgs{Path: path}, nil, nil)
}

// FileExists implements tool.ExecutionEnvironment.
func (c *Client) FileExists(ctx context.Context, path string) (bool, error) {
	var r ExistsResult
	err := c.do(ctx, OpFileExists, PathArgs{Path: path}, &r, nil)
	return r.Exists, err
}

// ListDirectory implements tool.ExecutionEnvironment.
func (c *Client) ListDirectory(ctx context.Context, path string, depth int) ([]tool.DirEntry, error) {
	var r ListResult
	if err := c.do(ctx, OpListDirectory, PathArgs{Path: path, Depth: depth}, &r, nil); err != nil {
		return nil, err
	}
	return r.Entries, nil
}

// ExecCommand implements tool.ExecutionEnvironment. On ctx end the remote
// process group is terminated and the partial result is returned together
// with an error wrapping ctx.Err() (when it arrives within the cancel wait).
func (c *Client) ExecCommand(ctx context.Context, command string, opts tool.ExecOptions) (*tool.ExecResult, error) {
	var res tool.ExecResult
	got := false
	args := ExecArgs{Command: command, Timeout: opts.Timeout, WorkingDir: opts.WorkingDir, Env: opts.Env}
	var onOut func([]byte)
	if opts.OnOutput != nil {
		args.Stream = true
		onOut = opts.OnOutput
		if limit := c.streamLimit; limit > 0 {
			if c.hello.HasFeature(FeatureStreamLimit) {
				args.StreamLimit = limit
			}
			// Also enforced here, for servers that predate the limit.
			left := limit
			onOut = func(chunk []byte) {
				if left <= 0 {
					return
				}
				if int64(len(chunk)) > left {
					chunk = chunk[:left]
				}
				left -= int64(len(chunk))
				opts.OnOutput(chunk)
			}
		}
	}
	err := c.do(ctx, OpExec, args, &resultProbe{v: &res, got: &got}, onOut)
	if err != nil {
		if got {
			return &res, err
		}
		return nil, err
	}
	return &res, nil
}

// resultProbe records whether a body was decoded.
type resultProbe struct {
	v   any
	got *bool
}

func (p *resultProbe) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	*p.got = true
	return json.Unmarshal(b, p.v)
}

// Grep implements tool.ExecutionEnvironment.
func (c *Client) Grep(ctx context.Context, pattern, path string, opts tool.GrepOptions) (*tool.GrepResult, error) {
	var r tool.GrepResult
	if err := c.do(ctx, OpGrep, GrepArgs{Pattern: pattern, Path: path, GlobFilter: opts.GlobFilter, CaseInsensitive: opts.CaseInsensitive, MaxResults: opts.MaxResults}, &r, nil); err != nil {
		return nil, err
	}
	return &r, nil
}

// Glob implements tool.ExecutionEnvironment.
func (c *Client) Glob(ctx context.Context, pattern, path string) ([]string, error) {
	var r GlobResult
	if err := c.do(ctx, OpGlob, GlobArgs{Pattern: pattern, Path: path}, &r, nil); err != nil {
		return nil, err
	}
	return r.Paths, nil
}

// Initialize implements tool.ExecutionEnvironment.
func (c *Client) Initialize(ctx context.Context) error {
	return c.do(ctx, OpInitialize, struct{}{}, nil, nil)
}

// Cleanup implements tool.ExecutionEnvironment. It does not close the
// stream; use Close.
func (c *Client) Cleanup(ctx context.Context) error {
	return c.do(ctx, OpCleanup, struct{}{}, nil, nil)
}

// WorkingDirectory returns the server's working directory (from the
// handshake).
func (c *Client) WorkingDirectory() string { return c.hello.WorkingDirectory }

// Platform returns the server's platform (from the handshake).
func (c *Client) Platform() string { return c.hello.Platform }

// OSVersion returns the server's OS version (from the handshake).
func (c *Client) OSVersion() string { return c.hello.OSVersion }

// ServerInfo returns the server's hello.
func (c *Client) ServerInfo() Hello { return c.hello }
