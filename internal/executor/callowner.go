package executor

import (
	"context"
	"errors"
	"fmt"
)

// ErrCallOwnerUnsupported is returned for a call whose context carries a
// call owner (ContextWithCallOwner) when the server's hello does not
// announce FeatureCallOwner: an executor that predates call owners would
// run the call unchecked, so the call is not sent. The caller opens a
// stream with the owner in its hello instead.
var ErrCallOwnerUnsupported = errors.New("the executor cannot check call owners; update the executor image")

type callOwnerKey struct{}

// ContextWithCallOwner returns a context whose calls carry o as their owner
// (see the package doc, "Call owners"): the server checks each such call
// against o's session owner record exactly as it checks the calls of a
// stream whose hello carried o, and refuses only that call (ErrNotOwner)
// once a newer driver of o's session used the workspace. It lets streams
// without an owner be shared by the sessions of a pod. A zero Owner leaves
// the calls without an owner.
func ContextWithCallOwner(ctx context.Context, o Owner) context.Context {
	return context.WithValue(ctx, callOwnerKey{}, o)
}

// callOwner returns the call owner of ctx for a call of op (nil: none), or
// why the call cannot be sent.
func (c *Client) callOwner(ctx context.Context, op string) (*Owner, error) {
	o, ok := ctx.Value(callOwnerKey{}).(Owner)
	if !ok || o.IsZero() {
		return nil, nil
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("%s: call %w", op, err)
	}
	if !c.hello.HasFeature(FeatureCallOwner) {
		return nil, fmt.Errorf("%s: %w", op, ErrCallOwnerUnsupported)
	}
	return &o, nil
}

// guardOf returns the owner guard a call is checked against: the stream's
// (nil: unchecked) for a call without an owner, else the guard of the
// call's owner. A call owner on a stream that has an owner must be that
// owner; anything else is a bad request. It runs in the call's goroutine;
// s.owner is set by the handshake, before any call starts.
func (s *server) guardOf(f *Frame) (*ownerGuard, *WireError) {
	if f.Owner == nil || !s.has(FeatureCallOwner) {
		// An executor without the feature ignores the field; clients do
		// not send it to one (ErrCallOwnerUnsupported).
		return s.owner, nil
	}
	if err := f.Owner.Validate(); err != nil {
		return nil, wireErrorf(CodeBadRequest, "%s: call %v", f.Op, err)
	}
	if s.owner != nil {
		if s.owner.owner != *f.Owner {
			return nil, wireErrorf(CodeBadRequest, "%s: the call's owner is not the stream's owner; a stream with an owner only runs calls of that owner", f.Op)
		}
		return s.owner, nil
	}
	// A guard holds no state, so none is kept per call owner: each call
	// reads its session's record again, like each call of an owned stream.
	return &ownerGuard{dir: s.ownerDir, owner: *f.Owner}, nil
}
