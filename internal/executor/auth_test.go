package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// handshake performs a keyed hello on a raw connection and switches it to
// authenticated frames.
func (rc *rawConn) handshake() {
	rc.t.Helper()
	key, err := newStreamKey()
	if err != nil {
		rc.t.Fatal(err)
	}
	rc.sendBody(string(mustJSON(Frame{Kind: KindHello, Body: mustJSON(clientHello{Hello: Hello{Version: Version}, Key: key})})))
	f := rc.recv()
	var h serverHello
	if f.Kind != KindHello || json.Unmarshal(f.Body, &h) != nil {
		rc.t.Fatalf("hello answered %+v", f)
	}
	if !bytes.Equal(h.Proof, helloProof(key, h.Hello)) {
		rc.t.Fatalf("server hello without a valid proof: %+v", h)
	}
	rc.out = &sealer{key: key, dir: clientToServer}
	rc.in = &opener{key: key, dir: serverToClient}
}

func sealed(t *testing.T, s *sealer, frames ...*Frame) [][]byte {
	t.Helper()
	var out [][]byte
	for _, f := range frames {
		b, err := s.seal(f, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestOpenerRefusesWhatThePeerDidNotSend(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeySize)
	other := bytes.Repeat([]byte{8}, KeySize)
	f0 := &Frame{ID: 1, Kind: KindResult, Body: json.RawMessage(`{"stdout":"genuine 0"}`)}
	f1 := &Frame{ID: 2, Kind: KindResult, Body: json.RawMessage(`{"stdout":"genuine 1"}`)}
	forged := &Frame{ID: 2, Kind: KindResult, Body: json.RawMessage(`{"stdout":"FORGED"}`)}
	genuine := sealed(t, &sealer{key: key, dir: serverToClient}, f0, f1)
	flip := bytes.Clone(genuine[1])
	flip[len(flip)-bodyTagSize-3] ^= 1
	plain, _ := EncodeFrame(forged, 0)
	tests := []struct {
		name string
		// stream is what the reader sees; the first frame is always genuine.
		stream [][]byte
	}{
		{"plain v1 frame injected", [][]byte{genuine[0], plain, genuine[1]}},
		{"frame sealed with another key", [][]byte{genuine[0], sealed(t, &sealer{key: other, dir: serverToClient, seq: 1}, forged)[0]}},
		{"replayed frame", [][]byte{genuine[0], genuine[0]}},
		{"frame reflected from the other direction", [][]byte{genuine[0], sealed(t, &sealer{key: key, dir: clientToServer, seq: 1}, forged)[0]}},
		{"frame dropped", [][]byte{genuine[0], sealed(t, &sealer{key: key, dir: serverToClient, seq: 2}, f1)[0]}},
		{"body modified", [][]byte{genuine[0], flip}},
		{"bogus length prefix", [][]byte{genuine[0], {0x01, 0xff, 0xff, 0xff}, genuine[1]}},
		{"garbage", [][]byte{genuine[0], []byte(strings.Repeat("\x00garbage", 8)), genuine[1]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bytes.NewReader(bytes.Join(tt.stream, nil))
			o := &opener{key: key, dir: serverToClient}
			f, err := o.read(r, DefaultMaxFrame)
			if err != nil || string(f.Body) != string(f0.Body) {
				t.Fatalf("genuine first frame = %+v, %v", f, err)
			}
			f, err = o.read(r, DefaultMaxFrame)
			if !errors.Is(err, ErrFrameAuth) || recoverable(err) {
				t.Fatalf("second read = %+v, %v; want an unrecoverable ErrFrameAuth", f, err)
			}
			if f != nil {
				t.Errorf("a frame was returned with the authentication error: %+v", f)
			}
		})
	}
}

func TestOpenerReadsGenuineFramesAndSkipsOversizedOnes(t *testing.T) {
	key := bytes.Repeat([]byte{1}, KeySize)
	s := &sealer{key: key, dir: clientToServer}
	big := &Frame{ID: 1, Kind: KindCall, Op: OpGlob, Body: mustJSON(GlobArgs{Pattern: strings.Repeat("x", 4096)})}
	first := sealed(t, s, big)[0]
	bad := s.sealBody([]byte(`{"id":2,"kind":1}`))
	last := sealed(t, s, &Frame{ID: 3, Kind: KindCancel})[0]
	stream := bytes.Join([][]byte{first, bad, last}, nil)
	o := &opener{key: key, dir: clientToServer}
	r := bytes.NewReader(stream)
	if _, err := o.read(r, 1024); !errors.Is(err, ErrFrameTooLarge) || !recoverable(err) {
		t.Fatalf("oversized genuine frame = %v, want a recoverable ErrFrameTooLarge", err)
	}
	if f, err := o.read(r, 1024); !errors.Is(err, ErrMalformedFrame) || f == nil || f.ID != 2 {
		t.Fatalf("malformed genuine frame = %+v, %v, want ErrMalformedFrame with id 2", f, err)
	}
	if f, err := o.read(r, 1024); err != nil || f.Kind != KindCancel || f.ID != 3 {
		t.Fatalf("frame after them = %+v, %v", f, err)
	}
	if _, err := o.read(r, 1024); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream = %v, want io.EOF", err)
	}
}

func TestHandshake(t *testing.T) {
	t.Run("server refuses a hello without a key", func(t *testing.T) {
		s := serve(t, ServeOptions{})
		rc := &rawConn{t: t, w: s.client, r: s.client}
		rc.sendBody(`{"kind":"hello","body":{"version":2}}`)
		if f := rc.recv(); f.Kind != KindError || f.Error.Code != CodeBadRequest || !strings.Contains(f.Error.Message, "stream key") {
			t.Fatalf("hello without a key answered %+v", f)
		}
		rc.handshake() // the server still waits for a proper hello
		rc.sendBody(`{"id":1,"kind":"call","op":"file_exists","body":{"path":"."}}`)
		if f := rc.recv(); f.Kind != KindResult || f.ID != 1 {
			t.Errorf("call after the keyed hello answered %+v", f)
		}
	})
	t.Run("server refuses a version 1 client clearly", func(t *testing.T) {
		s := serve(t, ServeOptions{})
		rc := &rawConn{t: t, w: s.client, r: s.client}
		rc.sendBody(`{"kind":"hello","body":{"version":1}}`)
		f := rc.recv()
		if f.Kind != KindError || f.Error.Code != CodeVersion || !strings.Contains(f.Error.Message, "unsupported protocol version 1, this executor speaks 2") {
			t.Errorf("hello v1 answered %+v", f)
		}
		<-s.done
		s.done <- nil
	})
	for _, tt := range []struct {
		name   string
		answer func(key []byte) string // the fake server's answer body
		want   string
	}{
		{"client refuses a version 1 server clearly", func([]byte) string {
			return `{"kind":"error","error":{"code":"version","message":"unsupported protocol version 2, this executor speaks 1"}}`
		}, "unsupported protocol version 2, this executor speaks 1"},
		{"client refuses a hello without proof", func([]byte) string {
			return string(mustJSON(Frame{Kind: KindHello, Body: mustJSON(Hello{Version: Version})}))
		}, "does not prove the stream key"},
		{"client refuses a hello with a proof for another key", func([]byte) string {
			h := Hello{Version: Version, WorkingDirectory: "/w"}
			return string(mustJSON(Frame{Kind: KindHello, Body: mustJSON(serverHello{Hello: h, Proof: helloProof(make([]byte, KeySize), h)})}))
		}, "does not prove the stream key"},
		{"client refuses a proof over other fields", func(key []byte) string {
			h := Hello{Version: Version, WorkingDirectory: "/w"}
			p := helloProof(key, h)
			h.WorkingDirectory = "/elsewhere"
			return string(mustJSON(Frame{Kind: KindHello, Body: mustJSON(serverHello{Hello: h, Proof: p})}))
		}, "does not prove the stream key"},
		{"client refuses features without their proof", func(key []byte) string {
			h := Hello{Version: Version, WorkingDirectory: "/w", Features: []string{FeatureCallOwner}}
			return string(mustJSON(Frame{Kind: KindHello, Body: mustJSON(serverHello{Hello: h, Proof: helloProof(key, h)})}))
		}, "features are not proven"},
		{"client refuses features proven with another key", func(key []byte) string {
			h := Hello{Version: Version, WorkingDirectory: "/w", Features: []string{FeatureCallOwner}}
			return string(mustJSON(Frame{Kind: KindHello, Body: mustJSON(serverHello{Hello: h, Proof: helloProof(key, h),
				FeaturesProof: featuresProof(make([]byte, KeySize), h.Features)})}))
		}, "features are not proven"},
		{"client refuses features other than the proven ones", func(key []byte) string {
			h := Hello{Version: Version, WorkingDirectory: "/w", Features: []string{FeatureCallOwner}}
			p := featuresProof(key, []string{"other"})
			return string(mustJSON(Frame{Kind: KindHello, Body: mustJSON(serverHello{Hello: h, Proof: helloProof(key, h), FeaturesProof: p})}))
		}, "features are not proven"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cr, sw := io.Pipe()
			sr, cw := io.Pipe()
			go func() {
				f, err := ReadFrame(sr, 0)
				if err != nil {
					return
				}
				var h clientHello
				_ = json.Unmarshal(f.Body, &h)
				sw.Write(frameBytes(tt.answer(h.Key)))
			}()
			_, err := NewClientContext(t.Context(), &duplex{Reader: cr, Writer: cw, closers: []io.Closer{cr, cw}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewClient = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestHelloFeaturesAreProven: the hello's proof covers every field but the
// features (as before features existed), and the features have a proof of
// their own bound to the key.
func TestHelloFeaturesAreProven(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeySize)
	other := bytes.Repeat([]byte{8}, KeySize)
	base := Hello{Version: Version, MaxFrame: 1 << 20, WorkingDirectory: "/w", Platform: "linux", OSVersion: "6"}
	with := base
	with.Features = []string{FeatureCallOwner}
	if !bytes.Equal(helloProof(key, base), helloProof(key, with)) {
		t.Error("the hello proof changed with features: clients that predate features would refuse the hello")
	}
	if featuresProof(key, nil) != nil {
		t.Error("a proof of no features")
	}
	p := featuresProof(key, with.Features)
	if bytes.Equal(p, featuresProof(other, with.Features)) || bytes.Equal(p, featuresProof(key, []string{"other"})) {
		t.Error("the features proof does not bind the key and the features")
	}
	if !with.HasFeature(FeatureCallOwner) || base.HasFeature(FeatureCallOwner) {
		t.Error("HasFeature")
	}
}

// injected is a server over io.Pipes whose output stream can also be
// written by a third party, like a workspace process that opened the
// executor's stdout.
type injected struct {
	client *Client
	inject func([]byte)
	// glue appends bytes to the server's next write, so they arrive
	// together with a genuine frame (in one read of the client).
	glue func([]byte)
}

func serveInjectable(t *testing.T) *injected {
	t.Helper()
	env, err := localenv.New(t.TempDir(), localenv.WithKillGrace(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	var wmu sync.Mutex // io.Pipe serialises writes anyway; this keeps each injection whole
	var glued []byte   // under wmu
	w := writerFunc(func(b []byte) (int, error) {
		wmu.Lock()
		defer wmu.Unlock()
		if glued == nil {
			return sw.Write(b)
		}
		_, err := sw.Write(append(bytes.Clone(b), glued...))
		glued = nil
		return len(b), err
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(context.Background(), sr, w, env, ServeOptions{})
		sw.Close()
	}()
	// A short stall timeout: a forged length prefix holds the reader inside
	// a frame that never completes.
	c, err := NewClientContext(t.Context(), &duplex{Reader: cr, Writer: cw, closers: []io.Closer{cr, cw}}, WithStallTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); sr.Close(); <-done })
	return &injected{client: c, inject: func(b []byte) { w.Write(b) }, glue: func(b []byte) {
		wmu.Lock()
		glued = b
		wmu.Unlock()
	}}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func TestInjectedFramesNeverReachTheCaller(t *testing.T) {
	forgedResult := func(id uint64) []byte {
		b, _ := EncodeFrame(&Frame{ID: id, Kind: KindResult, Body: mustJSON(tool.ExecResult{Stdout: "FORGED"})}, 0)
		return b
	}
	tests := []struct {
		name  string
		bytes func(id uint64) []byte
	}{
		{"forged result frame", forgedResult},
		{"forged output and result frames", func(id uint64) []byte {
			out, _ := EncodeFrame(&Frame{ID: id, Kind: KindOutput, Data: []byte("FORGED")}, 0)
			return append(out, forgedResult(id)...)
		}},
		{"bogus length prefix", func(uint64) []byte { return []byte{0x01, 0xff, 0xff, 0xff} }},
		{"garbage", func(uint64) []byte { return []byte(strings.Repeat("FORGED\n", 100)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := serveInjectable(t)
			c := s.client
			started := make(chan struct{})
			var once sync.Once
			var mu sync.Mutex
			var streamed strings.Builder
			type answer struct {
				res *tool.ExecResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := c.ExecCommand(t.Context(), "echo genuine; sleep 30", tool.ExecOptions{OnOutput: func(b []byte) {
					mu.Lock()
					streamed.Write(b)
					mu.Unlock()
					once.Do(func() { close(started) })
				}})
				done <- answer{res, err}
			}()
			<-started
			c.mu.Lock()
			id := c.nextID // the call in flight
			c.mu.Unlock()
			s.inject(tt.bytes(id))
			a := <-done
			if a.res != nil && strings.Contains(a.res.Stdout, "FORGED") {
				t.Fatalf("a forged result reached the caller: %+v", a.res)
			}
			if !errors.Is(a.err, ErrStreamClosed) || !errors.Is(a.err, ErrFrameAuth) {
				t.Errorf("call in flight = %+v, %v; want ErrStreamClosed wrapping ErrFrameAuth", a.res, a.err)
			}
			mu.Lock()
			if strings.Contains(streamed.String(), "FORGED") {
				t.Errorf("forged output reached the caller: %q", streamed.String())
			}
			mu.Unlock()
			if _, err := c.FileExists(t.Context(), "."); !errors.Is(err, ErrStreamClosed) {
				t.Errorf("call after the corruption = %v, want ErrStreamClosed (the stream must be replaced)", err)
			}
		})
	}
}

// TestStallCountsReadAheadBytes: the client reads ahead of its frames, so a
// short injection can arrive in one read together with a genuine frame and
// then wait in the read-ahead buffer. The stall timer must still see the
// half-received frame those bytes start: the call in flight fails with the
// stall, not only when the next genuine frame happens to arrive.
func TestStallCountsReadAheadBytes(t *testing.T) {
	partial := []byte{0, 0, 0, 9, 'F', 'O', 'R', 'G', 'E', 'D'} // 10 of a header's 20 bytes
	tests := []struct {
		name string
		// glued: the partial frame follows the command's first output
		// frame in the same write; otherwise it comes alone after it.
		glued bool
	}{
		{"read ahead with a genuine frame", true},
		{"alone on an idle stream", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := serveInjectable(t)
			started := make(chan struct{})
			var once sync.Once
			done := make(chan error, 1)
			if tt.glued {
				s.glue(partial)
			}
			go func() {
				// The command's only output is its first line: no other
				// genuine frame arrives before the stall timeout.
				_, err := s.client.ExecCommand(t.Context(), "echo genuine; sleep 30", tool.ExecOptions{OnOutput: func([]byte) {
					once.Do(func() { close(started) })
				}})
				done <- err
			}()
			if !tt.glued {
				<-started
				s.inject(partial)
			}
			err := <-done
			if !errors.Is(err, ErrStreamClosed) || !errors.Is(err, ErrFrameAuth) {
				t.Fatalf("call in flight = %v; want ErrStreamClosed wrapping ErrFrameAuth", err)
			}
			if !strings.Contains(err.Error(), "stopped arriving midway") {
				t.Errorf("call in flight = %v; want the stall of the half-received frame, not a later error", err)
			}
			select {
			case <-started:
			default:
				t.Error("the genuine output before the partial frame never reached the caller")
			}
		})
	}
}

// TestProgressUnderReadAhead steps a clock by hand through the frames a
// read-ahead buffer holds: bytes count as progress when they arrive from
// the stream, and bytes already read ahead start the next frame.
func TestProgressUnderReadAhead(t *testing.T) {
	key := bytes.Repeat([]byte{2}, KeySize)
	frames := sealed(t, &sealer{key: key, dir: serverToClient},
		&Frame{ID: 1, Kind: KindOutput, Data: []byte("first")},
		&Frame{ID: 1, Kind: KindResult, Body: json.RawMessage(`{"stdout":"second"}`)})
	first, second := frames[0], frames[1]

	var cmu sync.Mutex
	epoch := time.Unix(1_000_000, 0)
	now := epoch
	setClock := func(d time.Duration) { cmu.Lock(); now = epoch.Add(d); cmu.Unlock() }
	pr, pw := io.Pipe()
	t.Cleanup(func() { pr.Close() })
	p := &progressReader{r: pr, now: func() time.Time { cmu.Lock(); defer cmu.Unlock(); return now }}
	br := bufio.NewReaderSize(p, maxKeptBuffer)
	o := &opener{key: key, dir: serverToClient}
	write := func(b []byte) {
		go func() { pw.Write(b) }()
	}
	stalledAt := func(d time.Duration) (time.Duration, bool) { return p.stalled(epoch.Add(d)) }
	// poll waits until the reader has recorded an arrival at the clock's
	// time (an io.Pipe write returns before the reader's bookkeeping).
	poll := func(at time.Duration) {
		t.Helper()
		for range 10000 {
			if since, ok := stalledAt(at); ok && since == 0 {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("no arrival recorded at +%s", at)
	}

	// The first frame and 10 bytes of the second arrive in one read at +0.
	p.expectFrame(br.Buffered())
	if _, ok := stalledAt(0); ok {
		t.Fatal("an empty stream between frames counts as a half-received frame")
	}
	write(append(bytes.Clone(first), second[:10]...))
	if f, err := o.read(br, 0); err != nil || string(f.Data) != "first" {
		t.Fatalf("first frame = %+v, %v", f, err)
	}
	p.frameDone()
	if br.Buffered() != 10 {
		t.Fatalf("%d bytes read ahead, want 10", br.Buffered())
	}

	// readLoop comes back an hour later (a slow callback): the bytes read
	// ahead start the next frame from then on.
	setClock(time.Hour)
	p.expectFrame(br.Buffered())
	steps := []struct {
		at    time.Duration
		write []byte // arrives at this time
		want  time.Duration
	}{
		{at: time.Hour + 20*time.Second, want: 20 * time.Second},
		{at: time.Hour + 25*time.Second, write: second[10:30]},
		{at: time.Hour + 40*time.Second, want: 15 * time.Second},
		{at: time.Hour + 70*time.Second, want: 45 * time.Second},
	}
	got := make(chan *Frame, 1)
	go func() {
		f, err := o.read(br, 0)
		if err != nil {
			t.Errorf("second frame: %v", err)
		}
		got <- f
	}()
	for _, st := range steps {
		if st.write != nil {
			setClock(st.at)
			write(st.write)
			poll(st.at)
			continue
		}
		since, ok := stalledAt(st.at)
		if !ok || since != st.want {
			t.Errorf("at +%s: stalled = %s, %v; want %s, true", st.at, since, ok, st.want)
		}
	}
	write(second[30:])
	if f := <-got; f == nil || string(f.Body) != `{"stdout":"second"}` {
		t.Fatalf("second frame = %+v", f)
	}
	p.frameDone()
	if _, ok := stalledAt(2 * time.Hour); ok {
		t.Error("a completed frame still counts as half-received")
	}
}

// FuzzOpenFrame injects arbitrary bytes at an arbitrary position of a
// genuine authenticated stream: the reader returns the genuine frames
// before the injection point, in order, and then an authentication error
// (or the end of the stream); never a frame made of injected bytes.
func FuzzOpenFrame(f *testing.F) {
	plain, _ := EncodeFrame(&Frame{ID: 2, Kind: KindResult, Body: json.RawMessage(`{"stdout":"FORGED"}`)}, 0)
	f.Add([]byte{}, uint16(0))
	f.Add(plain, uint16(0))
	f.Add(plain, uint16(70))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint16(200))
	f.Add([]byte{0, 0, 0, 2, '{', '}'}, uint16(9999))
	key := bytes.Repeat([]byte{3}, KeySize)
	s := &sealer{key: key, dir: serverToClient}
	var genuine [][]byte
	var want []*Frame
	for i := range 3 {
		fr := &Frame{ID: uint64(i + 1), Kind: KindResult, Body: json.RawMessage(`{"n":` + string(rune('0'+i)) + `}`)}
		b, err := s.seal(fr, 0)
		if err != nil {
			f.Fatal(err)
		}
		genuine = append(genuine, b)
		want = append(want, fr)
	}
	stream := bytes.Join(genuine, nil)
	f.Fuzz(func(t *testing.T, data []byte, at uint16) {
		cut := int(at) % (len(stream) + 1)
		in := bytes.Join([][]byte{stream[:cut], data, stream[cut:]}, nil)
		o := &opener{key: key, dir: serverToClient}
		r := bytes.NewReader(in)
		for i := 0; ; i++ {
			fr, err := o.read(r, 1<<16)
			if err != nil {
				if len(data) == 0 {
					if !errors.Is(err, io.EOF) || i != len(want) {
						t.Fatalf("clean stream ended after %d frames with %v", i, err)
					}
					return
				}
				if !errors.Is(err, ErrFrameAuth) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("read %d: unexpected error %v", i, err)
				}
				return
			}
			if i >= len(want) || fr.ID != want[i].ID || string(fr.Body) != string(want[i].Body) {
				t.Fatalf("read %d returned a frame that is not the genuine frame %d: %+v", i, i, fr)
			}
		}
	})
}
