package executor

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func TestClientOverPipes(t *testing.T) {
	s := serve(t, ServeOptions{})
	c := newClient(t, s)
	if c.WorkingDirectory() != s.env.WorkingDirectory() || c.OSVersion() != s.env.OSVersion() {
		t.Errorf("handshake metadata %+v", c.ServerInfo())
	}
	exercise(t, c)
}

func TestConcurrentRequests(t *testing.T) {
	s := serve(t, ServeOptions{})
	c := newClient(t, s)
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("f%d.txt", i)
			switch i % 2 {
			case 0:
				res, err := c.ExecCommand(ctx, fmt.Sprintf("sleep 0.2; echo %d", i), tool.ExecOptions{})
				if err != nil || res.Stdout != fmt.Sprintf("%d\n", i) {
					errs <- fmt.Errorf("exec %d = %+v, %v", i, res, err)
				}
			case 1:
				want := strings.Repeat(name, 1000)
				if err := c.WriteFile(ctx, name, []byte(want)); err != nil {
					errs <- err
					return
				}
				fc, err := c.ReadFile(ctx, name, tool.ReadOptions{})
				if err != nil || string(fc.Content) != want {
					errs <- fmt.Errorf("read %d: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestCancelOneWhileOthersContinue(t *testing.T) {
	s := serve(t, ServeOptions{}, localenv.WithKillGrace(200*time.Millisecond))
	c := newClient(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	var once sync.Once
	type out struct {
		res *tool.ExecResult
		err error
	}
	victim := make(chan out, 1)
	go func() {
		res, err := c.ExecCommand(ctx, "echo pid=$$; sleep 30", tool.ExecOptions{
			Timeout:  time.Minute,
			OnOutput: func([]byte) { once.Do(func() { close(started) }) },
		})
		victim <- out{res, err}
	}()
	<-started
	var wg sync.WaitGroup
	others := make(chan error, 5)
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.ExecCommand(t.Context(), fmt.Sprintf("sleep 0.3; echo %d", i), tool.ExecOptions{})
			if err != nil || res.Stdout != fmt.Sprintf("%d\n", i) {
				others <- fmt.Errorf("other %d = %+v, %v", i, res, err)
			}
		}()
	}
	cancel()
	v := <-victim
	if !errors.Is(v.err, context.Canceled) {
		t.Errorf("cancelled exec err = %v, want context.Canceled", v.err)
	}
	if v.res == nil || !strings.HasPrefix(v.res.Stdout, "pid=") {
		t.Fatalf("cancelled exec lost its partial output: %+v", v.res)
	}
	var pid int
	fmt.Sscanf(v.res.Stdout, "pid=%d", &pid)
	if !processGone(pid) {
		t.Errorf("cancelled command %d still running", pid)
	}
	wg.Wait()
	close(others)
	for err := range others {
		t.Error(err)
	}
	// The stream is still usable.
	if _, err := c.FileExists(t.Context(), "."); err != nil {
		t.Errorf("call after cancellation: %v", err)
	}
}

func TestOversizedFrames(t *testing.T) {
	t.Run("request", func(t *testing.T) {
		s := serve(t, ServeOptions{})
		c := newClient(t, s, WithMaxFrame(1024))
		err := c.WriteFile(t.Context(), "big", bytes.Repeat([]byte("x"), 2000))
		if !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "request refused") {
			t.Errorf("oversized request: %v, want ErrFrameTooLarge", err)
		}
		if err := c.WriteFile(t.Context(), "small", []byte("x")); err != nil {
			t.Errorf("call after an oversized request: %v", err)
		}
	})
	t.Run("request above the server limit", func(t *testing.T) {
		s := serve(t, ServeOptions{MaxFrame: 1024})
		c := newClient(t, s) // client default is larger; the server's hello lowers it
		if err := c.WriteFile(t.Context(), "big", bytes.Repeat([]byte("x"), 2000)); !errors.Is(err, ErrFrameTooLarge) {
			t.Errorf("oversized request: %v, want ErrFrameTooLarge", err)
		}
	})
	t.Run("response", func(t *testing.T) {
		s := serve(t, ServeOptions{MaxFrame: 4096})
		c := newClient(t, s)
		if err := s.env.WriteFile(t.Context(), "big", bytes.Repeat([]byte("y\n"), 2000)); err != nil {
			t.Fatal(err)
		}
		_, err := c.ReadFile(t.Context(), "big", tool.ReadOptions{})
		var re *RemoteError
		if !errors.Is(err, ErrFrameTooLarge) || !errors.As(err, &re) || re.Code != CodeFrameTooLarge {
			t.Errorf("oversized response: %v, want a frame_too_large remote error", err)
		}
		fc, err := c.ReadFile(t.Context(), "big", tool.ReadOptions{Limit: 10})
		if err != nil || fc.TotalLines != 2000 {
			t.Errorf("ranged read after an oversized response: %+v, %v", fc, err)
		}
	})
}

func TestFileTooLargeCrossesTheStream(t *testing.T) {
	s := serve(t, ServeOptions{}, localenv.WithMaxReadBytes(10))
	c := newClient(t, s)
	if err := c.WriteFile(t.Context(), "f", []byte("0123456789abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadFile(t.Context(), "f", tool.ReadOptions{}); !errors.Is(err, localenv.ErrTooLarge) {
		t.Errorf("ReadFile = %v, want ErrTooLarge", err)
	}
}

// rawConn speaks frames by hand to a server.
type rawConn struct {
	t   *testing.T
	w   io.Writer
	r   io.Reader
	out *sealer // set by handshake
	in  *opener
}

func (rc *rawConn) sendBytes(b []byte) {
	rc.t.Helper()
	if _, err := rc.w.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *rawConn) sendBody(body string) {
	if rc.out != nil {
		rc.sendBytes(rc.out.sealBody([]byte(body)))
		return
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
	rc.sendBytes(append(hdr[:], body...))
}

func (rc *rawConn) recv() *Frame {
	rc.t.Helper()
	f, err := rc.in.next(rc.r, 0)
	if err != nil {
		rc.t.Fatalf("read answer: %v", err)
	}
	return f
}

func TestMalformedFramesAreRefused(t *testing.T) {
	s := serve(t, ServeOptions{MaxFrame: 1024})
	rc := &rawConn{t: t, w: s.client, r: s.client}
	// Before the handshake: anything but hello is refused.
	rc.sendBody(`{"id":1,"kind":"call","op":"glob"}`)
	if f := rc.recv(); f.Kind != KindError || f.Error.Code != CodeBadRequest {
		t.Errorf("call before hello answered %+v", f)
	}
	rc.handshake()
	tests := []struct {
		name   string
		body   string
		wantID uint64
		code   string
	}{
		{"not json", `{{{`, 0, CodeBadFrame},
		{"bad json with id", `{"id":7,"kind":1}`, 7, CodeBadFrame},
		{"unknown kind", `{"id":8,"kind":"bogus"}`, 8, CodeBadFrame},
		{"call without op", `{"id":9,"kind":"call"}`, 9, CodeBadFrame},
		{"call without id", `{"kind":"call","op":"glob"}`, 0, CodeBadFrame},
		{"unknown op", `{"id":10,"kind":"call","op":"format_disk"}`, 10, CodeUnknownOp},
		{"bad arguments", `{"id":11,"kind":"call","op":"read_file","body":{"path":5}}`, 11, CodeBadRequest},
		{"oversized", `{"id":12,"kind":"call","op":"glob","body":{"pattern":"` + strings.Repeat("x", 2000) + `"}}`, 0, CodeFrameTooLarge},
		{"result from a client", `{"id":13,"kind":"result"}`, 13, CodeBadRequest},
		{"second hello", `{"kind":"hello","body":{"version":1}}`, 0, CodeBadRequest},
		{"path escape", `{"id":14,"kind":"call","op":"read_file","body":{"path":"../../etc/passwd"}}`, 14, CodePathEscapes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc.t = t
			rc.sendBody(tt.body)
			f := rc.recv()
			if f.Kind != KindError || f.ID != tt.wantID || f.Error.Code != tt.code {
				t.Errorf("answer %+v (error %+v), want error id %d code %s", f, f.Error, tt.wantID, tt.code)
			}
		})
	}
	rc.t = t
	// The stream still works.
	rc.sendBody(`{"id":20,"kind":"call","op":"file_exists","body":{"path":"."}}`)
	f := rc.recv()
	var ex ExistsResult
	if f.Kind != KindResult || f.ID != 20 || json.Unmarshal(f.Body, &ex) != nil || !ex.Exists {
		t.Errorf("valid call after malformed frames answered %+v", f)
	}
}

func frameBytes(body string) []byte {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
	return append(hdr[:], body...)
}

func TestVersionMismatch(t *testing.T) {
	s := serve(t, ServeOptions{})
	rc := &rawConn{t: t, w: s.client, r: s.client}
	rc.sendBody(`{"kind":"hello","body":{"version":99}}`)
	if f := rc.recv(); f.Kind != KindError || f.Error.Code != CodeVersion {
		t.Errorf("hello v99 answered %+v", f)
	}
	if err := <-s.done; err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("Serve = %v, want a version error", err)
	}
	s.done <- nil // for the cleanup
}

func TestStreamBreaksMidCall(t *testing.T) {
	s := serve(t, ServeOptions{})
	c := newClient(t, s)
	errc := startInFlight(t, c)
	s.kill()
	err := <-errc
	if !errors.Is(err, ErrStreamClosed) || !strings.Contains(err.Error(), "in flight") {
		t.Errorf("in-flight call = %v, want ErrStreamClosed", err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the stream broke")
	}
	if _, err := c.FileExists(t.Context(), "."); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("call after the break = %v, want ErrStreamClosed", err)
	}
}

func TestServeCancelsInFlightCallsWhenInputEnds(t *testing.T) {
	s := serve(t, ServeOptions{}, localenv.WithKillGrace(100*time.Millisecond))
	c := newClient(t, s)
	started := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var out strings.Builder
	go c.ExecCommand(t.Context(), "echo pid=$$; sleep 30", tool.ExecOptions{
		Timeout: time.Minute, OnOutput: func(b []byte) {
			mu.Lock()
			out.Write(b)
			mu.Unlock()
			once.Do(func() { close(started) })
		},
	})
	<-started
	c.Close()
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its input ended")
	}
	var pid int
	mu.Lock()
	fmt.Sscanf(out.String(), "pid=%d", &pid)
	mu.Unlock()
	if pid == 0 || !processGone(pid) {
		t.Errorf("command %d survived the end of the stream", pid)
	}
}
