package executor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// sharedClient is a client of a stream without an owner to a server keeping
// its owner records in dir.
func sharedClient(t *testing.T, dir string, opts ServeOptions) *Client {
	t.Helper()
	opts.OwnerDir = dir
	return newClient(t, serve(t, opts))
}

// worksAs makes one call with o as its call owner and reports its error.
func worksAs(c *Client, o Owner) error {
	_, err := c.FileExists(ContextWithCallOwner(context.Background(), o), ".")
	return err
}

// rawCall sends f as a call past the client's own checks and returns the
// answer frame.
func rawCall(t *testing.T, c *Client, f *Frame) *Frame {
	t.Helper()
	pc := &pendingCall{resp: make(chan *Frame, 1)}
	c.mu.Lock()
	c.nextID++
	f.ID, f.Kind = c.nextID, KindCall
	c.pending[f.ID] = pc
	c.mu.Unlock()
	if err := c.write(f, c.sendMax); err != nil {
		t.Fatalf("write call: %v", err)
	}
	select {
	case r := <-pc.resp:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to the raw call")
		return nil
	}
}

// TestCallOwnersShareOneStream: calls of many owners interleave on one
// stream without an owner; each is checked against its own session's
// record, which each owner's first call writes.
func TestCallOwnersShareOneStream(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "owners")
	c := sharedClient(t, dir, ServeOptions{})
	if !c.ServerInfo().HasFeature(FeatureCallOwner) {
		t.Fatalf("server hello features %q do not announce %s", c.ServerInfo().Features, FeatureCallOwner)
	}
	const owners, calls = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, owners*calls)
	for i := range owners {
		o := Owner{SessionUID: fmt.Sprintf("s-%d", i), Holder: "mgr-0", Epoch: int64(i)}
		for j := range calls {
			wg.Go(func() {
				ctx := ContextWithCallOwner(t.Context(), o)
				res, err := c.ExecCommand(ctx, fmt.Sprintf("echo %d-%d", i, j), tool.ExecOptions{})
				switch {
				case err != nil:
					errs <- fmt.Errorf("owner %d call %d: %w", i, j, err)
				case res.Stdout != fmt.Sprintf("%d-%d\n", i, j):
					errs <- fmt.Errorf("owner %d call %d: stdout %q", i, j, res.Stdout)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range owners {
		if got, want := record(t, dir, fmt.Sprintf("s-%d", i)), (ownerRecord{"mgr-0", int64(i)}); got != want {
			t.Errorf("record of s-%d = %+v, want %+v", i, got, want)
		}
	}
}

// TestSupersededCallOwnerIsRefusedAlone: once a newer driver of a session
// used the workspace, the calls of its older driver on a shared stream are
// refused with ErrNotOwner naming the newer one, while the stream stays open
// and the calls of other owners (and of the newer driver) go on.
func TestSupersededCallOwnerIsRefusedAlone(t *testing.T) {
	old := Owner{SessionUID: "s-1", Holder: "ns-a/ao/ao-1", Epoch: 4}
	tests := []struct {
		name  string
		newer Owner
		// hello: the newer driver comes over a stream with the owner in
		// its hello; else as a call owner on the same shared stream.
		hello bool
	}{
		{"newer epoch on its own stream", Owner{SessionUID: "s-1", Holder: "ns-b/ao/ao-9", Epoch: 5}, true},
		{"newer epoch on the shared stream", Owner{SessionUID: "s-1", Holder: "ns-b/ao/ao-9", Epoch: 5}, false},
		{"newer epoch of the same holder", Owner{SessionUID: "s-1", Holder: "ns-a/ao/ao-1", Epoch: 7}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "owners")
			c := sharedClient(t, dir, ServeOptions{})
			other := Owner{SessionUID: "s-2", Holder: "ns-a/ao/ao-1", Epoch: 1}
			if err := worksAs(c, old); err != nil {
				t.Fatalf("old driver's first call: %v", err)
			}
			if err := worksAs(c, other); err != nil {
				t.Fatalf("other session's first call: %v", err)
			}
			if tt.hello {
				if _, err := ownedClient(t, dir, tt.newer); err != nil {
					t.Fatalf("newer driver: %v", err)
				}
			} else if err := worksAs(c, tt.newer); err != nil {
				t.Fatalf("newer driver's call: %v", err)
			}
			wantRefused := ownerRecord{Holder: old.Holder, Epoch: old.Epoch}
			if rec := record(t, dir, "s-1"); rec == wantRefused {
				t.Fatalf("the newer driver was not recorded: %+v", rec)
			}
			for range 2 { // refused again: the refusal stands
				err := worksAs(c, old)
				var re *RemoteError
				if !errors.Is(err, ErrNotOwner) || !errors.As(err, &re) || re.Owner == nil || *re.Owner != tt.newer {
					t.Fatalf("old driver's call = %v, want ErrNotOwner naming %+v", err, tt.newer)
				}
			}
			if err := c.Err(); err != nil {
				t.Fatalf("the shared stream ended after a refused call: %v", err)
			}
			if err := worksAs(c, other); err != nil {
				t.Errorf("other session's call after the refusal: %v", err)
			}
			if !tt.hello {
				if err := worksAs(c, tt.newer); err != nil {
					t.Errorf("newer driver's call after the refusal: %v", err)
				}
			}
			if err := works(c); err != nil {
				t.Errorf("call without an owner after the refusal: %v", err)
			}
		})
	}
}

// TestCallOwnerOnAnOwnedStream: a stream with an owner (from its hello) only
// runs calls of that owner; calls with another owner are bad requests
// refused by the server, and bad call owners too.
func TestCallOwnerOnAnOwnedStream(t *testing.T) {
	o := Owner{SessionUID: "s-1", Holder: "a", Epoch: 1}
	other := Owner{SessionUID: "s-2", Holder: "a", Epoch: 1}
	tests := []struct {
		name    string
		hello   Owner // zero: none
		call    Owner
		wantErr string // the answer's error code; "" accepted
	}{
		{"hello owner, same call owner", o, o, ""},
		{"hello owner, another call owner", o, other, CodeBadRequest},
		{"hello owner, another epoch of the session", o, Owner{SessionUID: "s-1", Holder: "a", Epoch: 2}, CodeBadRequest},
		{"no owner, invalid call owner", Owner{}, Owner{SessionUID: "bad/uid", Holder: "a"}, CodeBadRequest},
		{"no owner, call owner", Owner{}, other, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "owners")
			c, err := ownedClient(t, dir, tt.hello)
			if err != nil {
				t.Fatal(err)
			}
			call := tt.call
			ans := rawCall(t, c, &Frame{Op: OpFileExists, Body: mustJSON(PathArgs{Path: "."}), Owner: &call})
			switch {
			case tt.wantErr == "" && ans.Kind != KindResult:
				t.Errorf("answer %s %+v, want a result", ans.Kind, ans.Error)
			case tt.wantErr != "" && (ans.Kind != KindError || ans.Error.Code != tt.wantErr):
				t.Errorf("answer %s %+v, want error %s", ans.Kind, ans.Error, tt.wantErr)
			}
			if tt.wantErr != "" {
				if m, _ := filepath.Glob(filepath.Join(dir, call.SessionUID)); len(m) != 0 && call.SessionUID != o.SessionUID {
					t.Errorf("a refused call owner was recorded: %v", m)
				}
			}
			if err := works(c); err != nil {
				t.Errorf("the stream's own call afterwards: %v", err)
			}
		})
	}
}

// TestCallOwnerNeedsTheFeature: against an executor without call owners
// (which would ignore the field and run the call unchecked) a call with an
// owner fails with ErrCallOwnerUnsupported and never runs; the client checks
// the owner before anything is sent.
func TestCallOwnerNeedsTheFeature(t *testing.T) {
	o := Owner{SessionUID: "s-1", Holder: "a", Epoch: 1}
	tests := []struct {
		name    string
		without []string
		owner   Owner
		want    error
	}{
		{"server without call owners", []string{FeatureCallOwner}, o, ErrCallOwnerUnsupported},
		{"invalid owner", nil, Owner{SessionUID: "s 1", Holder: "a"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "owners")
			c := sharedClient(t, dir, ServeOptions{WithoutFeatures: tt.without})
			for _, f := range tt.without {
				if c.ServerInfo().HasFeature(f) {
					t.Errorf("hello announces %s, which the server was told to go without", f)
				}
			}
			ctx := ContextWithCallOwner(t.Context(), tt.owner)
			_, err := c.ExecCommand(ctx, "touch ran", tool.ExecOptions{})
			if err == nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("call = %v, want %v", err, tt.want)
			}
			if _, err := c.StartStdio(ctx, []string{"sh", "-c", "touch ran"}, nil, ""); err == nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("stdio call = %v, want %v", err, tt.want)
			}
			if ok, err := c.FileExists(t.Context(), "ran"); ok || err != nil {
				t.Errorf("the refused call ran (%v, %v)", ok, err)
			}
			if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
				t.Errorf("owner records written: %v", m)
			}
		})
	}
}

// TestWithoutFeaturesBehavesLikeAnOlderExecutor: a server told to go
// without its features announces none (a client still accepts its
// hello) and, like an executor that predates them, ignores a call's owner:
// the call runs unchecked and no owner record is written.
func TestWithoutFeaturesBehavesLikeAnOlderExecutor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "owners")
	c := sharedClient(t, dir, ServeOptions{WithoutFeatures: []string{FeatureCallOwner, FeatureStreamLimit}})
	if got := c.ServerInfo().Features; len(got) != 0 {
		t.Errorf("features %q, want none", got)
	}
	o := Owner{SessionUID: "s-1", Holder: "a", Epoch: 1}
	ans := rawCall(t, c, &Frame{Op: OpFileExists, Body: mustJSON(PathArgs{Path: "."}), Owner: &o})
	if ans.Kind != KindResult {
		t.Errorf("call with an owner answered %s %+v, want a result", ans.Kind, ans.Error)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Errorf("owner records written by a server without call owners: %v", m)
	}
}

// TestSupersededCallOwnerStdio: a stdio call carries its owner too.
func TestSupersededCallOwnerStdio(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "owners")
	c := sharedClient(t, dir, ServeOptions{})
	old := Owner{SessionUID: "s-1", Holder: "a", Epoch: 1}
	if err := worksAs(c, Owner{SessionUID: "s-1", Holder: "b", Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	_, err := c.StartStdio(ContextWithCallOwner(t.Context(), old), []string{"cat"}, nil, "")
	if !errors.Is(err, ErrNotOwner) {
		t.Errorf("stdio call of a superseded owner = %v, want ErrNotOwner", err)
	}
}
