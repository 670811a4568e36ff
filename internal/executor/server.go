package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/go-logr/logr"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// ServeOptions configures Serve.
type ServeOptions struct {
	// MaxFrame limits frames in both directions (0: DefaultMaxFrame).
	MaxFrame int
	// Log receives connection-level problems (never request contents).
	Log logr.Logger
	// OwnerDir is the directory of the pod's owner records, shared by all
	// its serve processes (default DefaultOwnerDir, created 0700 when
	// missing). Only streams whose hello carries an Owner, and calls that
	// carry one, use it.
	OwnerDir string
	// MaxStdinQueue bounds the unread stdin of one stdio process
	// (0: DefaultStdinQueue).
	MaxStdinQueue int
	// WithoutFeatures are features (FeatureCallOwner) the server neither
	// announces nor accepts, behaving as an executor that predates them: to
	// roll a feature out gradually, or to test clients against older
	// executors.
	WithoutFeatures []string
}

// Serve answers protocol frames read from r with frames written to w,
// executing calls on env concurrently. It returns when r ends or ctx is
// done, after cancelling the calls in flight and waiting for them; a clean
// end of input returns nil. Bad frames and failing calls are answered with
// error frames and never end the stream.
func Serve(ctx context.Context, r io.Reader, w io.Writer, env tool.ExecutionEnvironment, opts ServeOptions) error {
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.OwnerDir == "" {
		opts.OwnerDir = DefaultOwnerDir
	}
	s := &server{env: env, w: w, max: opts.MaxFrame, log: opts.Log, ownerDir: opts.OwnerDir, calls: map[uint64]context.CancelFunc{},
		keyed: make(chan *opener)}
	s.stdio.limit = opts.MaxStdinQueue
	for _, f := range features {
		if !slices.Contains(opts.WithoutFeatures, f) {
			s.features = append(s.features, f)
		}
	}
	ctx, cancelAll := context.WithCancel(ctx)
	defer cancelAll()

	// Reading happens in its own goroutine so ctx can end Serve even while
	// a read blocks; the caller owns r and closes it.
	type readResult struct {
		f   *Frame
		err error
	}
	// Until the handshake is done frames are plain; after each hello the
	// reader waits for the handshake's verdict, so the frame after an
	// accepted hello is already read as an authenticated one.
	frames := make(chan readResult)
	go func() {
		// Read ahead: most frames are small, and one read of the stream
		// often holds several.
		br := bufio.NewReaderSize(r, maxKeptBuffer)
		var in *opener
		for {
			f, err := in.next(br, s.max)
			select {
			case frames <- readResult{f, err}:
			case <-ctx.Done():
				return
			}
			if err != nil && !recoverable(err) {
				return
			}
			if in == nil && err == nil && f.Kind == KindHello {
				select {
				case in = <-s.keyed:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	next := func() (*Frame, error) {
		select {
		case rr := <-frames:
			return rr.f, rr.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	err := s.handshake(ctx, next)
	if err == nil {
		err = s.loop(ctx, next)
	}
	cancelAll()
	s.wg.Wait()
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

type server struct {
	env tool.ExecutionEnvironment
	max int
	log logr.Logger

	ownerDir string
	owner    *ownerGuard // set by the handshake when the hello carries an Owner
	features []string    // announced in the hello and accepted

	wmu sync.Mutex
	w   io.Writer
	out *sealer // under wmu; nil until the handshake is done

	keyed chan *opener // the handshake's verdict on each hello: nil (still plain) or the reader of the keyed stream

	mu    sync.Mutex
	calls map[uint64]context.CancelFunc
	wg    sync.WaitGroup

	paths pathLocks // one writer per path
	// sharedLockFailed logs once that the pod-wide path lock is unusable.
	sharedLockFailed sync.Once

	stdio stdioProcs // stdin queues of the running stdio calls (stdio.go)
}

func (s *server) handshake(ctx context.Context, next func() (*Frame, error)) error {
	for {
		f, err := next()
		if err != nil {
			if recoverable(err) {
				s.send(&Frame{Kind: KindError, Error: toWire(err)})
				continue
			}
			return err
		}
		if f.Kind != KindHello {
			s.send(&Frame{ID: f.ID, Kind: KindError, Error: wireErrorf(CodeBadRequest, "expected hello, got %s frame", f.Kind)})
			continue
		}
		var h clientHello
		if err := json.Unmarshal(f.Body, &h); err != nil {
			s.send(&Frame{Kind: KindError, Error: wireErrorf(CodeBadRequest, "decode hello: %v", err)})
			s.verdict(ctx, nil)
			continue
		}
		if h.Version != Version {
			s.send(&Frame{Kind: KindError, Error: wireErrorf(CodeVersion, "unsupported protocol version %d, this executor speaks %d", h.Version, Version)})
			return fmt.Errorf("handshake: client speaks protocol version %d, want %d", h.Version, Version)
		}
		if len(h.Key) != KeySize {
			s.send(&Frame{Kind: KindError, Error: wireErrorf(CodeBadRequest, "hello: a %d-byte stream key is required, got %d bytes", KeySize, len(h.Key))})
			s.verdict(ctx, nil)
			continue
		}
		if h.Owner != nil {
			if err := h.Owner.Validate(); err != nil {
				s.send(&Frame{Kind: KindError, Error: wireErrorf(CodeBadRequest, "hello: %v", err)})
				s.verdict(ctx, nil)
				continue
			}
			g := &ownerGuard{dir: s.ownerDir, owner: *h.Owner}
			if err := g.check(ctx); err != nil {
				s.log.Info("refused the hello of a superseded driver", "error", err.Error())
				s.send(&Frame{Kind: KindError, Error: notOwnerWire(err)})
				return fmt.Errorf("handshake: %w", err)
			}
			s.owner = g
		}
		return s.accept(ctx, h)
	}
}

// accept answers an accepted hello with the server's hello and its proof of
// the key, then switches both directions to authenticated frames.
func (s *server) accept(ctx context.Context, h clientHello) error {
	mine := Hello{
		Version:          Version,
		MaxFrame:         s.max,
		WorkingDirectory: s.env.WorkingDirectory(),
		Platform:         s.env.Platform(),
		OSVersion:        s.env.OSVersion(),
		Features:         s.features,
	}
	s.wmu.Lock()
	b, err := EncodeFrame(&Frame{Kind: KindHello, Body: mustJSON(serverHello{
		Hello: mine, Proof: helloProof(h.Key, mine), FeaturesProof: featuresProof(h.Key, mine.Features),
	})}, s.max)
	if err == nil {
		_, err = s.w.Write(b)
	}
	if err == nil {
		s.out = &sealer{key: h.Key, dir: serverToClient}
	}
	s.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("handshake: write hello: %w", err)
	}
	s.verdict(ctx, &opener{key: h.Key, dir: clientToServer})
	return nil
}

// verdict tells the reader how to read the frames after a hello.
func (s *server) verdict(ctx context.Context, in *opener) {
	select {
	case s.keyed <- in:
	case <-ctx.Done():
	}
}

func (s *server) loop(ctx context.Context, next func() (*Frame, error)) error {
	for {
		f, err := next()
		if err != nil {
			if !recoverable(err) {
				return err
			}
			var id uint64
			if f != nil {
				id = f.ID
			}
			s.log.Info("refused a bad frame", "id", id, "error", err.Error())
			s.send(&Frame{ID: id, Kind: KindError, Error: toWire(err)})
			continue
		}
		switch f.Kind {
		case KindCall:
			s.start(ctx, f)
		case KindCancel:
			s.mu.Lock()
			cancel := s.calls[f.ID]
			s.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		case KindStdin:
			s.stdio.input(f)
		case KindHello:
			s.send(&Frame{Kind: KindError, Error: wireErrorf(CodeBadRequest, "duplicate hello")})
		default:
			s.send(&Frame{ID: f.ID, Kind: KindError, Error: wireErrorf(CodeBadRequest, "unexpected %s frame from a client", f.Kind)})
		}
	}
}

func (s *server) start(ctx context.Context, f *Frame) {
	s.mu.Lock()
	if _, dup := s.calls[f.ID]; dup {
		s.mu.Unlock()
		s.send(&Frame{ID: f.ID, Kind: KindError, Error: wireErrorf(CodeBadRequest, "request id %d is already in flight", f.ID)})
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	s.calls[f.ID] = cancel
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.calls, f.ID)
			s.mu.Unlock()
			cancel()
		}()
		resp := s.call(cctx, f)
		resp.ID = f.ID
		if err := s.send(resp); errors.Is(err, ErrFrameTooLarge) {
			s.send(&Frame{ID: f.ID, Kind: KindError, Error: wireErrorf(CodeFrameTooLarge,
				"%s: the response does not fit in one frame (%v); ask for less, e.g. a range of lines", f.Op, err)})
		}
	}()
}

// call runs one request and returns its answer frame.
func (s *server) call(ctx context.Context, f *Frame) (resp *Frame) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Info("call panicked", "op", f.Op, "panic", fmt.Sprint(r))
			resp = &Frame{Kind: KindError, Error: wireErrorf(CodeInternal, "%s: internal error in the executor", f.Op)}
		}
	}()
	g, bad := s.guardOf(f)
	if bad != nil {
		return &Frame{Kind: KindError, Error: bad}
	}
	if err := g.check(ctx); err != nil {
		s.log.Info("refused a call of a superseded driver", "op", f.Op, "error", err.Error())
		return &Frame{Kind: KindError, Error: notOwnerWire(err)}
	}
	decode := func(v any) *Frame {
		if len(f.Body) == 0 {
			return nil
		}
		if err := json.Unmarshal(f.Body, v); err != nil {
			return &Frame{Kind: KindError, Error: wireErrorf(CodeBadRequest, "%s: decode arguments: %v", f.Op, err)}
		}
		return nil
	}
	result := func(v any, err error) *Frame {
		if err != nil {
			return &Frame{Kind: KindError, Error: toWire(err)}
		}
		return &Frame{Kind: KindResult, Body: mustJSON(v)}
	}
	env := s.env
	switch f.Op {
	case OpReadFile:
		var a ReadArgs
		if bad := decode(&a); bad != nil {
			return bad
		}
		fc, err := env.ReadFile(ctx, a.Path, tool.ReadOptions{Offset: a.Offset, Limit: a.Limit, MaxBytes: a.MaxBytes})
		if err != nil {
			return result(nil, err)
		}
		return result(FileContent{Content: fc.Content, TotalLines: fc.TotalLines, Size: fc.Size, Binary: fc.Binary, MediaType: fc.MediaType}, nil)
	case OpWriteFile:
		var a PathArgs
		if bad := decode(&a); bad != nil {
			return bad
		}
		return result(struct{}{}, s.write(ctx, a))
	case OpDeleteFile:
		var a PathArgs
		if bad := decode(&a); bad != nil {
			return bad
		}
		return result(struct{}{}, s.remove(ctx, a))
	case OpFileExists:
		var a PathArgs
		if bad := decode(&a); bad != nil {
			return bad
		}
		ok, err := env.FileExists(ctx, a.Path)
		return result(ExistsResult{Exists: ok}, err)
	case OpListDirectory:
		var a PathArgs
		if bad := decode(&a); bad != nil {
			return bad
		}
		ents, err := env.ListDirectory(ctx, a.Path, a.Depth)
		return result(ListResult{Entries: ents}, err)
	case OpExec:
		var a ExecArgs
		if bad := decode(&a); bad != nil {
			return bad
		}
		opts := tool.ExecOptions{Timeout: a.Timeout, WorkingDir: a.WorkingDir, Env: a.Env}
		if a.Stream {
			limit := int64(-1) // no limit
			if a.StreamLimit > 0 && s.has(FeatureStreamLimit) {
				limit = a.StreamLimit
			}
			// The environment serialises OnOutput, so left needs no lock.
			left := limit
			opts.OnOutput = func(chunk []byte) {
				if limit >= 0 {
					if left <= 0 {
						return
					}
					if int64(len(chunk)) > left {
						chunk = chunk[:left]
					}
					left -= int64(len(chunk))
				}
				s.send(&Frame{ID: f.ID, Kind: KindOutput, Data: chunk})
			}
		}
		res, err := env.ExecCommand(ctx, a.Command, opts)
		if err != nil && res != nil {
			// Cancelled: the error frame carries the partial result.
			return &Frame{Kind: KindError, Error: toWire(err), Body: mustJSON(res)}
		}
		return result(res, err)
	case OpGrep:
		var a GrepArgs
		if bad := decode(&a); bad != nil {
			return bad
		}
		res, err := env.Grep(ctx, a.Pattern, a.Path, tool.GrepOptions{GlobFilter: a.GlobFilter, CaseInsensitive: a.CaseInsensitive, MaxResults: a.MaxResults})
		return result(res, err)
	case OpGlob:
		var a GlobArgs
		if bad := decode(&a); bad != nil {
			return bad
		}
		paths, err := env.Glob(ctx, a.Pattern, a.Path)
		return result(GlobResult{Paths: paths}, err)
	case OpInitialize:
		return result(struct{}{}, env.Initialize(ctx))
	case OpCleanup:
		return result(struct{}{}, env.Cleanup(ctx))
	case OpStdio:
		return s.runStdio(ctx, f)
	case OpFetch:
		return s.fetch(ctx, f) // fetch.go
	}
	return &Frame{Kind: KindError, Error: wireErrorf(CodeUnknownOp, "unknown operation %q", f.Op)}
}

// has reports whether the server has feature (not switched off by
// ServeOptions.WithoutFeatures).
func (s *server) has(feature string) bool { return slices.Contains(s.features, feature) }

// send writes one frame, sealed once the handshake is done; frames are
// encoded and written under one lock so they reach the stream in the order
// of their sequence numbers. Oversized frames are not written and reported
// with an error wrapping ErrFrameTooLarge.
func (s *server) send(f *Frame) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.out.send(s.w, f, s.max)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own result types are marshalled; they always encode.
		return json.RawMessage(`null`)
	}
	return b
}
