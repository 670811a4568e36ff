package executor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version spoken by this package. Version 2 added
// the per-stream key and authenticated frames (see the package doc).
const Version = 2

// DefaultMaxFrame is the default limit on the JSON body of one frame. It
// leaves room for a 10 MiB file in base64.
const DefaultMaxFrame = 32 << 20

// Frame kinds.
const (
	KindHello  = "hello"
	KindCall   = "call"
	KindResult = "result"
	KindError  = "error"
	KindOutput = "output"
	KindCancel = "cancel"
)

// Frame is one protocol message.
type Frame struct {
	ID    uint64          `json:"id,omitempty"`
	Kind  string          `json:"kind"`
	Op    string          `json:"op,omitempty"`
	Body  json.RawMessage `json:"body,omitempty"`
	Error *WireError      `json:"error,omitempty"`
	Data  []byte          `json:"data,omitempty"` // output, stdout and stdin chunk
	// EOF on a stdin frame closes the process's stdin (stdio.go).
	EOF bool `json:"eof,omitempty"`
}

// WireError is the error carried by an error frame.
type WireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Owner is the session's current driver per the workspace's owner
	// record, on a CodeNotOwner refusal by a newer driver.
	Owner *Owner `json:"owner,omitempty"`
}

var (
	// ErrFrameTooLarge is wrapped by errors for frames above the limit.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrMalformedFrame is wrapped by errors for frames that do not decode.
	ErrMalformedFrame = errors.New("malformed frame")
)

// EncodeFrame returns f with its length prefix, or an error wrapping
// ErrFrameTooLarge when the body exceeds max bytes (max <= 0: no limit).
func EncodeFrame(f *Frame, max int) ([]byte, error) {
	body, err := marshalFrame(f, max)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	copy(out[4:], body)
	return out, nil
}

// marshalFrame returns the JSON body of f, or an error wrapping
// ErrFrameTooLarge when it exceeds max bytes (max <= 0: no limit).
func marshalFrame(f *Frame, max int) ([]byte, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode frame: %w", err)
	}
	if max > 0 && len(body) > max {
		return nil, fmt.Errorf("encode frame: %w: %d bytes, the limit is %d bytes", ErrFrameTooLarge, len(body), max)
	}
	if uint64(len(body)) > 1<<32-1 {
		return nil, fmt.Errorf("encode frame: %w: %d bytes", ErrFrameTooLarge, len(body))
	}
	return body, nil
}

// DecodeFrame decodes and validates the JSON body of one frame. Errors wrap
// ErrMalformedFrame; the returned frame, if non-nil, may still carry the id
// of a malformed frame so it can be answered.
func DecodeFrame(body []byte) (*Frame, error) {
	var f Frame
	if err := json.Unmarshal(body, &f); err != nil {
		// Try to recover the id for the error answer.
		var idOnly struct {
			ID uint64 `json:"id"`
		}
		if json.Unmarshal(body, &idOnly) == nil && idOnly.ID != 0 {
			return &Frame{ID: idOnly.ID}, fmt.Errorf("decode frame: %w: %v", ErrMalformedFrame, err)
		}
		return nil, fmt.Errorf("decode frame: %w: %v", ErrMalformedFrame, err)
	}
	switch f.Kind {
	case KindHello:
	case KindCall:
		if f.ID == 0 || f.Op == "" {
			return &f, fmt.Errorf("decode frame: %w: a call needs a non-zero id and an op", ErrMalformedFrame)
		}
	case KindResult, KindOutput, KindCancel, KindStdin, KindStdout, KindStarted:
		if f.ID == 0 {
			return &f, fmt.Errorf("decode frame: %w: %s frame without id", ErrMalformedFrame, f.Kind)
		}
	case KindError:
		if f.Error == nil {
			return &f, fmt.Errorf("decode frame: %w: error frame without error", ErrMalformedFrame)
		}
	default:
		return &f, fmt.Errorf("decode frame: %w: unknown kind %q", ErrMalformedFrame, f.Kind)
	}
	return &f, nil
}

// ReadFrame reads one frame from r. A frame above max bytes (max <= 0: no
// limit) is skipped whole and reported with an error wrapping
// ErrFrameTooLarge; a frame that does not decode is reported with an error
// wrapping ErrMalformedFrame. After either, the stream is still in sync and
// the next frame can be read. Any other error means the stream is unusable.
func ReadFrame(r io.Reader, max int) (*Frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int64(binary.BigEndian.Uint32(hdr[:]))
	if max > 0 && n > int64(max) {
		if _, err := io.CopyN(io.Discard, r, n); err != nil {
			return nil, fmt.Errorf("skip oversized frame: %w", noEOF(err))
		}
		return nil, fmt.Errorf("read frame: %w: %d bytes, the limit is %d bytes", ErrFrameTooLarge, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("read frame body: %w", noEOF(err))
	}
	return DecodeFrame(body)
}

// noEOF turns an EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// recoverable reports whether a ReadFrame error leaves the stream usable.
func recoverable(err error) bool {
	return errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformedFrame)
}
