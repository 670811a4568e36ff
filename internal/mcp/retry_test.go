package mcp

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
)

// resetting listens on a free loopback address and resets every
// connection it accepts (nothing answers there yet, as while a server
// restarts); each accepted connection is sent on the returned channel.
// stop closes the listener and frees the address.
func resetting(t *testing.T) (addr string, accepted <-chan struct{}, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0) // close with a reset
			_ = c.Close()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { _ = ln.Close(); <-done }) }
	t.Cleanup(stop)
	return ln.Addr().String(), ch, stop
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// A remote server that starts listening only after the first attempt (a
// Service created a moment before the session, a server restarting) is
// connected within the timeout: the session gets its tools. On the old
// code the first refused connection failed Connect.
func TestConnectWaitsForAServerThatStartsLate(t *testing.T) {
	addr, accepted, stop := resetting(t)
	type result struct {
		c   *Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := Connect(t.Context(), Server{Name: "late", URL: "http://" + addr + "/mcp", Timeout: time.Minute})
		done <- result{c, err}
	}()
	select {
	case <-accepted: // the first attempt was reset
	case r := <-done:
		t.Fatalf("Connect returned before any attempt: conn=%v err=%v", r.c, r.err)
	}
	stop()
	mcptest.New(t, 0, mcptest.WithAddress(addr))
	r := <-done
	if r.err != nil {
		t.Fatalf("Connect: %v", r.err)
	}
	defer r.c.Close()
	if len(r.c.Tools()) == 0 {
		t.Fatal("connected without tools")
	}
}

// Errors that are not an unreachable server end Connect at once: the
// manager's refusal of an address is not tried again, and a server that
// stays down is reported with its last error once the timeout has passed.
func TestConnectRetriesOnlyUnreachable(t *testing.T) {
	t.Run("refused address", func(t *testing.T) {
		_, err := Connect(t.Context(), Server{Name: "meta", URL: "http://169.254.169.254/mcp", Timeout: time.Minute})
		if err == nil || !strings.Contains(err.Error(), "refusing to connect") || strings.Contains(err.Error(), "not reachable in") {
			t.Fatalf("err = %v, want the refusal, not tried again", err)
		}
	})
	t.Run("down for the whole timeout", func(t *testing.T) {
		_, err := Connect(context.Background(), Server{Name: "down", URL: "http://" + freeAddr(t) + "/mcp", Timeout: 500 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "not reachable in") {
			t.Fatalf("err = %v, want the last refusal and the number of attempts", err)
		}
	})
}

func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"no such host", &net.DNSError{Err: "no such host", Name: "mcp.example", IsNotFound: true}, true},
		{"refusal of the manager", errors.New("mcp: refusing to connect to 169.254.169.254:80"), false},
		{"protocol", errors.New(`calling "initialize": bad response`), false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("%s: unreachable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
