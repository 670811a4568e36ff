package executor

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
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
	// Owner on a call frame is the call's owner token (see the package
	// doc, "Call owners"): the server checks the call against that owner's
	// record. Only calls carry it.
	Owner *Owner `json:"owner,omitempty"`
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

// maxKeptBuffer bounds the frame buffers a stream keeps between frames
// (its write buffer, its read buffer, its read-ahead): a larger frame gets a
// buffer of its own that is dropped once the frame is written or read.
const maxKeptBuffer = 64 << 10

// EncodeFrame returns f with its length prefix, or an error wrapping
// ErrFrameTooLarge when the body exceeds max bytes (max <= 0: no limit).
// The body is what json.Marshal(f) gives.
func EncodeFrame(f *Frame, max int) ([]byte, error) {
	f, err := canonicalBody(f)
	if err != nil {
		return nil, err
	}
	out, err := appendFrameJSON(make([]byte, 4, 4+frameSizeHint(f)), f)
	if err != nil {
		return nil, err
	}
	if err := checkFrameSize(len(out)-4, max); err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, nil
}

// checkFrameSize returns an error wrapping ErrFrameTooLarge when a JSON
// body of n bytes exceeds max (max <= 0: no limit) or the length prefix.
func checkFrameSize(n, max int) error {
	if max > 0 && n > max {
		return fmt.Errorf("encode frame: %w: %d bytes, the limit is %d bytes", ErrFrameTooLarge, n, max)
	}
	if uint64(n) > 1<<32-1 {
		return fmt.Errorf("encode frame: %w: %d bytes", ErrFrameTooLarge, n)
	}
	return nil
}

// canonicalBody returns f, or a copy of f whose Body is compacted and
// escaped the way json.Marshal embeds a json.RawMessage, so that
// appendFrameJSON can append it as is. It fails on a Body that is not JSON,
// as json.Marshal(f) does.
func canonicalBody(f *Frame) (*Frame, error) {
	if len(f.Body) == 0 {
		return f, nil
	}
	body, err := json.Marshal(f.Body)
	if err != nil {
		return nil, fmt.Errorf("encode frame body: %w", err)
	}
	c := *f
	c.Body = body
	return &c, nil
}

// frameSizeHint is about the size of f's JSON body.
func frameSizeHint(f *Frame) int {
	return 64 + len(f.Op) + len(f.Body) + base64.StdEncoding.EncodedLen(len(f.Data))
}

// appendFrameJSON appends the JSON body of f to dst: the bytes json.Marshal(f)
// gives, written field by field without reflection. f.Body is appended as
// is, so it must be empty or as json.Marshal writes JSON (compact, HTML
// characters escaped): what mustJSON returns, or what canonicalBody makes.
func appendFrameJSON(dst []byte, f *Frame) ([]byte, error) {
	dst = append(dst, '{')
	if f.ID != 0 {
		dst = append(dst, `"id":`...)
		dst = strconv.AppendUint(dst, f.ID, 10)
		dst = append(dst, ',')
	}
	dst = append(dst, `"kind":`...)
	dst = appendJSONString(dst, f.Kind)
	if f.Op != "" {
		dst = append(dst, `,"op":`...)
		dst = appendJSONString(dst, f.Op)
	}
	if len(f.Body) > 0 {
		dst = append(dst, `,"body":`...)
		dst = append(dst, f.Body...)
	}
	if f.Error != nil {
		e, err := json.Marshal(f.Error)
		if err != nil {
			return dst, fmt.Errorf("encode frame error: %w", err)
		}
		dst = append(dst, `,"error":`...)
		dst = append(dst, e...)
	}
	if len(f.Data) > 0 {
		dst = append(dst, `,"data":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, f.Data)
		dst = append(dst, '"')
	}
	if f.EOF {
		dst = append(dst, `,"eof":true`...)
	}
	if f.Owner != nil {
		o, err := json.Marshal(f.Owner)
		if err != nil {
			return dst, fmt.Errorf("encode frame owner: %w", err)
		}
		dst = append(dst, `,"owner":`...)
		dst = append(dst, o...)
	}
	return append(dst, '}'), nil
}

// appendJSONString appends s as a JSON string, as json.Marshal writes it.
// Kinds and ops are short ASCII words and are appended directly; anything
// else goes through json.Marshal.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
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
