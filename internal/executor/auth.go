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
}

// newStreamKey returns a fresh random key.
func newStreamKey() ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generate stream key: %w", err)
	}
	return k, nil
}

// helloProof binds the server's hello to the stream key.
func helloProof(key []byte, h Hello) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("agent-operator executor hello\x00"))
	m.Write(mustJSON(h))
	return m.Sum(nil)
}

// frameMAC starts the tag of frame seq of direction dir in domain d.
func frameMAC(key []byte, dir direction, d byte, seq uint64, length []byte) hash.Hash {
	m := hmac.New(sha256.New, key)
	var pre [2 + 8]byte
	pre[0] = byte(dir)
	pre[1] = d
	binary.BigEndian.PutUint64(pre[2:], seq)
	m.Write(pre[:])
	m.Write(length)
	return m
}

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
}

// seal returns the wire bytes of f: a 4-byte big-endian body length, the
// header tag, the JSON body and the body tag. A body above max bytes
// (max <= 0: no limit) is refused with an error wrapping ErrFrameTooLarge
// and consumes no sequence number.
func (s *sealer) seal(f *Frame, max int) ([]byte, error) {
	body, err := marshalFrame(f, max)
	if err != nil {
		return nil, err
	}
	return s.sealBody(body), nil
}

// sealBody returns the wire bytes of one frame with this JSON body.
func (s *sealer) sealBody(body []byte) []byte {
	out := make([]byte, 4+headerTagSize, 4+headerTagSize+len(body)+bodyTagSize)
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	copy(out[4:], frameMAC(s.key, s.dir, domainHeader, s.seq, out[:4]).Sum(nil)[:headerTagSize])
	bm := frameMAC(s.key, s.dir, domainBody, s.seq, out[:4])
	bm.Write(body)
	out = append(out, body...)
	out = bm.Sum(out)
	s.seq++
	return out
}

// opener reads the authenticated frames of one direction; it is used by
// one reader at a time.
type opener struct {
	key []byte
	dir direction
	seq uint64
}

// read reads and verifies one frame. Like ReadFrame, a genuine frame above
// max bytes is skipped with an error wrapping ErrFrameTooLarge and a genuine
// frame that does not decode is reported with an error wrapping
// ErrMalformedFrame; the stream stays usable after both. Bytes the peer did
// not send at this position give an error wrapping ErrFrameAuth, as soon as
// the header is read when the header is not genuine: a forged length never
// makes the reader wait for a body.
func (o *opener) read(r io.Reader, max int) (*Frame, error) {
	var hdr [4 + headerTagSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	length := hdr[:4]
	want := frameMAC(o.key, o.dir, domainHeader, o.seq, length).Sum(nil)[:headerTagSize]
	if !hmac.Equal(want, hdr[4:]) {
		return nil, fmt.Errorf("read frame %d: %w: the header was not sent by the peer", o.seq, ErrFrameAuth)
	}
	n := int64(binary.BigEndian.Uint32(length))
	bm := frameMAC(o.key, o.dir, domainBody, o.seq, length)
	var body []byte
	tooLarge := max > 0 && n > int64(max)
	if tooLarge {
		if _, err := io.CopyN(bm, r, n); err != nil {
			return nil, fmt.Errorf("skip oversized frame: %w", noEOF(err))
		}
	} else {
		body = make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, fmt.Errorf("read frame body: %w", noEOF(err))
		}
		bm.Write(body)
	}
	var tag [bodyTagSize]byte
	if _, err := io.ReadFull(r, tag[:]); err != nil {
		return nil, fmt.Errorf("read frame tag: %w", noEOF(err))
	}
	if !hmac.Equal(bm.Sum(nil), tag[:]) {
		return nil, fmt.Errorf("read frame %d: %w: the body was not sent by the peer", o.seq, ErrFrameAuth)
	}
	o.seq++
	if tooLarge {
		return nil, fmt.Errorf("read frame: %w: %d bytes, the limit is %d bytes", ErrFrameTooLarge, n, max)
	}
	return DecodeFrame(body)
}

// encode returns f's wire bytes: sealed when s is set (after the
// handshake), plain before.
func (s *sealer) encode(f *Frame, max int) ([]byte, error) {
	if s != nil {
		return s.seal(f, max)
	}
	return EncodeFrame(f, max)
}

// next reads one frame: verified when o is set (after the handshake), plain
// before.
func (o *opener) next(r io.Reader, max int) (*Frame, error) {
	if o != nil {
		return o.read(r, max)
	}
	return ReadFrame(r, max)
}
