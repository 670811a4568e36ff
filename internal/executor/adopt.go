package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrAdoptRefused is what a CodeAdoptRefused error unwraps to: the stream
// cannot adopt an owner (it has one, tried to adopt one before, or has run
// other calls). The stream stays usable as it was.
var ErrAdoptRefused = errors.New("the stream cannot adopt an owner")

// ErrAdoptUnsupported is returned by AdoptOwner when the server's hello does
// not announce FeatureAdoptOwner (an executor that predates the op): the
// caller opens a stream with the owner in its hello instead.
var ErrAdoptUnsupported = errors.New("the executor cannot adopt an owner; update the executor image")

// AdoptOwner makes o the owner of a stream opened without one, as if o had
// been presented in the stream's hello: the server checks o against the
// session's owner record exactly like such a hello (a superseded o is
// refused with ErrNotOwner and the server ends the stream), and checks
// every later call of the stream against it. It must be the stream's first
// call and succeeds at most once per stream; otherwise it fails with
// ErrAdoptRefused. On any failure but ErrAdoptUnsupported and a local
// validation error the caller should close the client and open another
// stream.
func (c *Client) AdoptOwner(ctx context.Context, o Owner) error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("%s: %w", OpAdoptOwner, err)
	}
	c.mu.Lock()
	has := c.owner != nil
	c.mu.Unlock()
	if has {
		return fmt.Errorf("%s: the stream has an owner already: %w", OpAdoptOwner, ErrAdoptRefused)
	}
	if !c.hello.HasFeature(FeatureAdoptOwner) {
		return fmt.Errorf("%s: %w", OpAdoptOwner, ErrAdoptUnsupported)
	}
	if err := c.do(ctx, OpAdoptOwner, o, nil, nil); err != nil {
		if errors.Is(err, ErrNotOwner) {
			// The server ends a stream whose adoption it refused, like
			// one whose hello it refused.
			c.Close()
		}
		return err
	}
	c.mu.Lock()
	c.owner = &o
	c.mu.Unlock()
	return nil
}

// adopt answers an adopt_owner call. It runs on the server's read loop, so
// it is ordered before every later frame of the stream, and only before any
// other call started: no call goroutine reads s.owner while it is set. A
// refusal by the owner record ends the stream (returned error), like a
// refused hello.
func (s *server) adopt(ctx context.Context, f *Frame) error {
	reply := func(we *WireError) {
		if we != nil {
			s.send(&Frame{ID: f.ID, Kind: KindError, Error: we})
			return
		}
		s.send(&Frame{ID: f.ID, Kind: KindResult, Body: mustJSON(struct{}{})})
	}
	switch {
	case s.owner != nil:
		reply(wireErrorf(CodeAdoptRefused, "%s: the stream has an owner already", OpAdoptOwner))
		return nil
	case s.adoptTried:
		reply(wireErrorf(CodeAdoptRefused, "%s: the stream tried to adopt an owner before", OpAdoptOwner))
		return nil
	case s.called:
		reply(wireErrorf(CodeAdoptRefused, "%s: the stream has run other calls; adopt must be its first call", OpAdoptOwner))
		return nil
	}
	s.adoptTried = true
	var o Owner
	if err := json.Unmarshal(f.Body, &o); err != nil {
		reply(wireErrorf(CodeBadRequest, "%s: decode arguments: %v", OpAdoptOwner, err))
		return nil
	}
	if err := o.Validate(); err != nil {
		reply(wireErrorf(CodeBadRequest, "%s: %v", OpAdoptOwner, err))
		return nil
	}
	g := &ownerGuard{dir: s.ownerDir, owner: o}
	if err := g.check(ctx); err != nil {
		s.log.Info("refused the adoption of a superseded driver", "error", err.Error())
		reply(notOwnerWire(err))
		return fmt.Errorf("adopt owner: %w", err)
	}
	s.owner = g
	reply(nil)
	return nil
}
