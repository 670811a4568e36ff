package executor

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
)

// KeySize is the size of the per-stream key the client sends in its hello.
const KeySize = 32

// Sizes of the tags of an authenticated frame.
const (
	headerTagSize = 16 // truncated HMAC-SHA256 over direction, sequence and length
	bodyTagSize   = sha256.Size
)

// ErrFrameAuth is wrapped by errors for bytes on an authenticated stream
// that the peer did not send in this order: a forged, replayed, reordered or
// corrupted frame. The stream is then unusable and must be replaced; no
// frame after it is trusted.
var ErrFrameAuth = errors.New("frame authentication failed")

// direction separates the two directions of a stream so a frame of one
// cannot be reflected into the other.
type direction byte

const (
	clientToServer direction = 'C'
	serverToClient direction = 'S'
)

// Tag domains.
const (
	domainHeader = 'H'
	domainBody   = 'B'
)

// clientHello is the body of the client's hello: the common fields, the
// fresh key that authenticates every later frame of the stream and the
// optional owner token.
type clientHello struct {
	Hello
	Key []byte `json:"key,omitempty"`
	// Owner, when set, makes the server check every call of the stream
	// against the session's owner record (owner.go).
	Owner *Owner `json:"owner,omitempty"`
}

// serverHello is the body of the server's hello: the common fields and a
// proof that the server holds the client's key.
type serverHello struct {
	Hello
	Proof []byte `json:"proof,omitempty"`
	// FeaturesProof binds Hello.Features to the key (featuresProof); absent
	// when there are no features.
	FeaturesProof []byte `json:"featuresProof,omitempty"`
}

// newStreamKey returns a fresh random key.
func newStreamKey() ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generate stream key: %w", err)
	}
	return k, nil
}

// helloProof binds the server's hello to the stream key. It covers every
// field but Features, exactly as before features existed, so clients that
// predate them still verify it; featuresProof covers those.
func helloProof(key []byte, h Hello) []byte {
	h.Features = nil
	m := hmac.New(sha256.New, key)
	m.Write([]byte("agent-operator executor hello\x00"))
	m.Write(mustJSON(h))
	return m.Sum(nil)
}

// featuresProof binds the features of a server's hello to the stream key
// (nil when there are none).
func featuresProof(key []byte, features []string) []byte {
	if len(features) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("agent-operator executor features\x00"))
	m.Write(mustJSON(features))
	return m.Sum(nil)
}

// tagger computes the tags of one direction of a stream. It holds one
// HMAC keyed with the stream key, created on first use and reset for every
// tag, and the scratch space of a tag, so tagging a frame allocates nothing.
// It is used by one goroutine at a time (its sealer's or opener's user).
type tagger struct {
	mac hash.Hash
	pre [2 + 8 + 4]byte
	sum [sha256.Size]byte
}

// start starts the tag of frame seq of direction dir in domain d over the
// frame's 4-byte length prefix; the body tag goes on with the body's bytes.
// key must be the same on every call.
func (t *tagger) start(key []byte, dir direction, d byte, seq uint64, length []byte) hash.Hash {
	if t.mac == nil {
		t.mac = hmac.New(sha256.New, key)
	} else {
		t.mac.Reset()
	}
	t.pre[0] = byte(dir)
	t.pre[1] = d
	binary.BigEndian.PutUint64(t.pre[2:], seq)
	copy(t.pre[10:], length)
	t.mac.Write(t.pre[:])
	return t.mac
}

// tag returns the tag started by start; it is valid until the next start.
func (t *tagger) tag() []byte { return t.mac.Sum(t.sum[:0]) }

// sealer writes the authenticated frames of one direction. Each frame
// carries a tag over its header and one over its body, both keyed with the
// stream key and bound to the direction and to the frame's position in the
// stream (an implicit sequence number), so a frame cannot be forged without
// the key, nor replayed, dropped or reordered undetected. It is not safe for
// concurrent use: the caller holds its write lock from seal to write, so
// frames reach the stream in sequence order.
type sealer struct {
	key []byte
	dir direction
	seq uint64

	tags tagger
	buf  []byte // the wire bytes of the last frame written, kept up to maxKeptBuffer
}

// seal returns the wire bytes of f in a new slice: a 4-byte big-endian body
// length, the header tag, the JSON body and the body tag. A body above max
// bytes (max <= 0: no limit) is refused with an error wrapping
// ErrFrameTooLarge and consumes no sequence number.
func (s *sealer) seal(f *Frame, max int) ([]byte, error) {
	f, err := canonicalBody(f)
	if err != nil {
		return nil, err
	}
	return s.appendSealed(nil, f, max)
}

// write seals f into the sealer's buffer and writes it to w in one Write.
// f.Body must be as appendFrameJSON takes it (mustJSON's output). The
// buffer is reused by the next frame unless it grew above maxKeptBuffer;
// w must not keep the slice (io.Writer's contract).
func (s *sealer) write(w io.Writer, f *Frame, max int) error {
	b, err := s.appendSealed(s.buf[:0], f, max)
	if cap(b) <= maxKeptBuffer {
		s.buf = b[:0]
	} else {
		s.buf = nil
	}
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// appendSealed appends the wire bytes of f to dst (see seal). On an error
// the returned slice holds what was appended so far and is only good for
// reuse as a buffer.
func (s *sealer) appendSealed(dst []byte, f *Frame, max int) ([]byte, error) {
	start := len(dst)
	var hdr [4 + headerTagSize]byte
	dst = append(dst, hdr[:]...)
	if need := frameSizeHint(f) + bodyTagSize; cap(dst)-len(dst) < need {
		dst = slices.Grow(dst, need)
	}
	dst, err := appendFrameJSON(dst, f)
	if err != nil {
		return dst, err
	}
	n := len(dst) - start - len(hdr)
	if err := checkFrameSize(n, max); err != nil {
		return dst, err
	}
	return s.sealAt(dst, start), nil
}

// sealBody returns the wire bytes of one frame with this JSON body, in a
// new slice.
func (s *sealer) sealBody(body []byte) []byte {
	out := make([]byte, 4+headerTagSize, 4+headerTagSize+len(body)+bodyTagSize)
	out = append(out, body...)
	return s.sealAt(out, 0)
}

// sealAt fills in the length and the header tag of the frame at
// b[start:] (room for the header, then the JSON body), appends the body tag
// and takes the frame's sequence number.
func (s *sealer) sealAt(b []byte, start int) []byte {
	frame := b[start:]
	length, body := frame[:4], frame[4+headerTagSize:]
	binary.BigEndian.PutUint32(length, uint32(len(body)))
	s.tags.start(s.key, s.dir, domainHeader, s.seq, length)
	copy(frame[4:], s.tags.tag()[:headerTagSize])
	s.tags.start(s.key, s.dir, domainBody, s.seq, length).Write(body)
	b = append(b, s.tags.tag()...)
	s.seq++
	return b
}

// opener reads the authenticated frames of one direction; it is used by
// one reader at a time.
type opener struct {
	key []byte
	dir direction
	seq uint64

	tags tagger
	hdr  [4 + headerTagSize]byte
	tag  [bodyTagSize]byte
	buf  []byte // the body of the last frame read, kept up to maxKeptBuffer
}

// read reads and verifies one frame. Like ReadFrame, a genuine frame above
// max bytes is skipped with an error wrapping ErrFrameTooLarge and a genuine
// frame that does not decode is reported with an error wrapping
// ErrMalformedFrame; the stream stays usable after both. Bytes the peer did
// not send at this position give an error wrapping ErrFrameAuth, as soon as
// the header is read when the header is not genuine: a forged length never
// makes the reader wait for a body. The returned frame shares no memory with
// the opener's buffers.
func (o *opener) read(r io.Reader, max int) (*Frame, error) {
	if _, err := io.ReadFull(r, o.hdr[:]); err != nil {
		return nil, err
	}
	length := o.hdr[:4]
	o.tags.start(o.key, o.dir, domainHeader, o.seq, length)
	if !hmac.Equal(o.tags.tag()[:headerTagSize], o.hdr[4:]) {
		return nil, fmt.Errorf("read frame %d: %w: the header was not sent by the peer", o.seq, ErrFrameAuth)
	}
	n := int64(binary.BigEndian.Uint32(length))
	bm := o.tags.start(o.key, o.dir, domainBody, o.seq, length)
	var body []byte
	tooLarge := max > 0 && n > int64(max)
	if tooLarge {
		if _, err := io.CopyN(bm, r, n); err != nil {
			return nil, fmt.Errorf("skip oversized frame: %w", noEOF(err))
		}
	} else {
		body = o.body(int(n))
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, fmt.Errorf("read frame body: %w", noEOF(err))
		}
		bm.Write(body)
	}
	if _, err := io.ReadFull(r, o.tag[:]); err != nil {
		return nil, fmt.Errorf("read frame tag: %w", noEOF(err))
	}
	if !hmac.Equal(o.tags.tag(), o.tag[:]) {
		return nil, fmt.Errorf("read frame %d: %w: the body was not sent by the peer", o.seq, ErrFrameAuth)
	}
	o.seq++
	if tooLarge {
		return nil, fmt.Errorf("read frame: %w: %d bytes, the limit is %d bytes", ErrFrameTooLarge, n, max)
	}
	// DecodeFrame copies what it keeps (json.Unmarshal copies strings,
	// base64 data and raw bodies), so body can be reused.
	return DecodeFrame(body)
}

// body returns a buffer for a body of n bytes: the opener's own up to
// maxKeptBuffer, a new one for a larger body.
func (o *opener) body(n int) []byte {
	if n > maxKeptBuffer {
		return make([]byte, n)
	}
	if cap(o.buf) < n {
		o.buf = make([]byte, n, max(n, 4<<10))
	}
	return o.buf[:n]
}

// send writes f to w: sealed when s is set (after the handshake), plain
// before. f.Body must be mustJSON's output (see appendFrameJSON).
func (s *sealer) send(w io.Writer, f *Frame, max int) error {
	if s != nil {
		return s.write(w, f, max)
	}
	b, err := EncodeFrame(f, max)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// next reads one frame: verified when o is set (after the handshake), plain
// before.
func (o *opener) next(r io.Reader, max int) (*Frame, error) {
	if o != nil {
		return o.read(r, max)
	}
	return ReadFrame(r, max)
}
