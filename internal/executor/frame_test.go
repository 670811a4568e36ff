package executor

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"math"
	"strings"
	"testing"
)

// referenceEncodeFrame is the encoder before appendFrameJSON: json.Marshal
// of the whole frame, behind its length prefix. The new encoding must give
// the same bytes.
func referenceEncodeFrame(f *Frame) ([]byte, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	copy(out[4:], body)
	return out, nil
}

// referenceSeal is the sealer before the reused HMAC and buffers: a new
// HMAC per tag over the reference encoding.
func referenceSeal(key []byte, dir direction, seq uint64, f *Frame) ([]byte, error) {
	plain, err := referenceEncodeFrame(f)
	if err != nil {
		return nil, err
	}
	length, body := plain[:4], plain[4:]
	mac := func(d byte) hash.Hash {
		m := hmac.New(sha256.New, key)
		var pre [2 + 8]byte
		pre[0] = byte(dir)
		pre[1] = d
		binary.BigEndian.PutUint64(pre[2:], seq)
		m.Write(pre[:])
		m.Write(length)
		return m
	}
	out := append([]byte{}, length...)
	out = append(out, mac(domainHeader).Sum(nil)[:headerTagSize]...)
	out = append(out, body...)
	bm := mac(domainBody)
	bm.Write(body)
	return bm.Sum(out), nil
}

// encodingCases are frames of every kind and field, with bodies as our
// own code makes them (mustJSON) and as a caller may pass them.
func encodingCases() []struct {
	name  string
	frame *Frame
} {
	return []struct {
		name  string
		frame *Frame
	}{
		{"empty", &Frame{}},
		{"hello", &Frame{Kind: KindHello, Body: mustJSON(clientHello{Hello: Hello{Version: Version, MaxFrame: DefaultMaxFrame}, Key: bytes.Repeat([]byte{0xfe}, KeySize)})}},
		{"call", &Frame{ID: 1, Kind: KindCall, Op: OpReadFile, Body: mustJSON(ReadArgs{Path: "a/b.go", Offset: 3, Limit: 10})}},
		{"largest id", &Frame{ID: math.MaxUint64, Kind: KindCancel}},
		{"html and line separators in the body", &Frame{ID: 2, Kind: KindCall, Op: OpExec, Body: mustJSON(ExecArgs{Command: "a <b> && c > d \u2028\u2029 \"q\" \\ \x00\x1f é"})}},
		{"result with file content", &Frame{ID: 3, Kind: KindResult, Body: mustJSON(FileContent{Content: []byte("x\x00\xff<&>\n"), TotalLines: 1, Size: 7, Binary: true, MediaType: "application/octet-stream"})}},
		{"error with owner", &Frame{ID: 4, Kind: KindError, Error: &WireError{Code: CodeNotOwner, Message: "superseded by <b> & \"c\"", Owner: &Owner{SessionUID: "s-1", Holder: "mgr-0", Epoch: 7}}}},
		{"error with a body", &Frame{ID: 5, Kind: KindError, Error: &WireError{Code: CodeCanceled, Message: "canceled"}, Body: mustJSON(map[string]int{"exitCode": -1})}},
		{"output data", &Frame{ID: 6, Kind: KindOutput, Data: []byte("line 1\nline <2>\n\x00\xff")}},
		{"stdin eof", &Frame{ID: 7, Kind: KindStdin, EOF: true}},
		{"stdin data and eof", &Frame{ID: 7, Kind: KindStdin, Data: []byte{1, 2, 3}, EOF: true}},
		{"empty data and body are omitted", &Frame{ID: 8, Kind: KindResult, Body: json.RawMessage{}, Data: []byte{}}},
		{"kind and op that need escaping", &Frame{ID: 9, Kind: "k\"<&>\u2028\xff\t", Op: "o\\p é"}},
		{"kind and op with html characters only", &Frame{ID: 9, Kind: "a<b>", Op: "x&y"}},
		{"op with a control character only", &Frame{ID: 9, Kind: KindCall, Op: "x\x7fy\x01"}},
		{"body with spaces and html, not as json.Marshal writes it", &Frame{ID: 10, Kind: KindResult, Body: json.RawMessage(" {\n \"a\" : [1, 2],\t\"b\": \"<x>&\u2028\" } ")}},
		{"call with an owner", &Frame{ID: 12, Kind: KindCall, Op: OpExec, Body: mustJSON(ExecArgs{Command: "ls"}), Owner: &Owner{SessionUID: "s-1", Holder: "ns/ao/ao-1", Epoch: 3}}},
		{"call owner that needs escaping", &Frame{ID: 13, Kind: KindCall, Op: OpStdio, Owner: &Owner{SessionUID: "s-1", Holder: "a<b>&\"c\"\u2028\xff", Epoch: math.MaxInt64}}},
		{"zero call owner", &Frame{ID: 14, Kind: KindCall, Op: OpGlob, Owner: &Owner{}}},
		{"every field", &Frame{ID: 15, Kind: KindError, Op: "x", Body: mustJSON(1), Error: &WireError{Code: "c"}, Data: []byte{1}, EOF: true, Owner: &Owner{SessionUID: "u"}}},
		{"big data", &Frame{ID: 11, Kind: KindStdout, Data: bytes.Repeat([]byte("0123456789abcdef"), 8<<10)}},
	}
}

func TestEncodingIsByteIdenticalToJSONMarshal(t *testing.T) {
	key := bytes.Repeat([]byte{5}, KeySize)
	for _, tt := range encodingCases() {
		t.Run(tt.name, func(t *testing.T) {
			want, err := referenceEncodeFrame(tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			got, err := EncodeFrame(tt.frame, 0)
			if err != nil {
				t.Fatalf("EncodeFrame: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("EncodeFrame =\n%q\nwant\n%q", got, want)
			}
			// The stream path appends bodies as is; ours come from
			// json.Marshal, any other is made canonical first.
			f, err := canonicalBody(tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			body, err := appendFrameJSON(nil, f)
			if err != nil || !bytes.Equal(body, want[4:]) {
				t.Errorf("appendFrameJSON = %q, %v\nwant %q", body, err, want[4:])
			}
			wantSealed, err := referenceSeal(key, serverToClient, 3, tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			var wire bytes.Buffer
			s := &sealer{key: key, dir: serverToClient, seq: 3}
			if err := s.write(&wire, f, 0); err != nil {
				t.Fatalf("sealer.write: %v", err)
			}
			if !bytes.Equal(wire.Bytes(), wantSealed) {
				t.Errorf("sealed frame differs from the reference sealer:\n%q\nwant\n%q", wire.Bytes(), wantSealed)
			}
			sealed, err := (&sealer{key: key, dir: serverToClient, seq: 3}).seal(tt.frame, 0)
			if err != nil || !bytes.Equal(sealed, wantSealed) {
				t.Errorf("seal = %q, %v\nwant %q", sealed, err, wantSealed)
			}
		})
	}
}

func TestEncodingRefusesWhatJSONMarshalRefuses(t *testing.T) {
	tests := []struct {
		name  string
		frame *Frame
		want  error // nil: any error
	}{
		{"body that is not json", &Frame{ID: 1, Kind: KindResult, Body: json.RawMessage(`{"a":`)}, nil},
		{"body above the limit", &Frame{ID: 1, Kind: KindResult, Body: mustJSON(strings.Repeat("x", 200))}, ErrFrameTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := referenceEncodeFrame(tt.frame); tt.want == nil && err == nil {
				t.Fatal("the reference encoder accepts the frame; the case is wrong")
			}
			if _, err := EncodeFrame(tt.frame, 128); err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("EncodeFrame = %v, want an error wrapping %v", err, tt.want)
			}
			s := &sealer{key: bytes.Repeat([]byte{1}, KeySize), dir: clientToServer}
			if _, err := s.seal(tt.frame, 128); err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("seal = %v, want an error wrapping %v", err, tt.want)
			}
			if s.seq != 0 {
				t.Errorf("a refused frame took sequence number %d", s.seq)
			}
		})
	}
}

// recorder keeps a copy of every Write.
type recorder struct{ writes [][]byte }

func (r *recorder) Write(b []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(b))
	return len(b), nil
}

func TestFrameBuffersDoNotCarryBytesIntoTheNextFrame(t *testing.T) {
	key := bytes.Repeat([]byte{6}, KeySize)
	frame := func(id uint64, size int) *Frame {
		return &Frame{ID: id, Kind: KindStdout, Data: bytes.Repeat([]byte{byte('A' + id)}, size)}
	}
	tests := []struct {
		name   string
		frames []*Frame
	}{
		{"large then small", []*Frame{frame(1, 256<<10), frame(2, 10)}},
		{"kept size then small", []*Frame{frame(1, 40<<10), frame(2, 10)}},
		{"small, large, empty, small", []*Frame{frame(1, 100), frame(2, 1<<20), {ID: 3, Kind: KindCancel}, frame(4, 1)}},
		{"shrinking", []*Frame{frame(1, 48<<10), frame(2, 4<<10), frame(3, 300), frame(4, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &sealer{key: key, dir: serverToClient}
			var rec recorder
			for i, f := range tt.frames {
				if err := s.write(&rec, f, 0); err != nil {
					t.Fatal(err)
				}
				if cap(s.buf) > maxKeptBuffer {
					t.Errorf("after frame %d the sealer keeps a %d-byte buffer, above %d", i, cap(s.buf), maxKeptBuffer)
				}
				want, err := referenceSeal(key, serverToClient, uint64(i), f)
				if err != nil {
					t.Fatal(err)
				}
				if got := rec.writes[i]; !bytes.Equal(got, want) {
					t.Errorf("frame %d: %d wire bytes differ from the reference's %d", i, len(got), len(want))
				}
			}
			// Read them all back through one opener before looking at any:
			// a frame must not share memory with the opener's buffer.
			o := &opener{key: key, dir: serverToClient}
			r := bytes.NewReader(bytes.Join(rec.writes, nil))
			var got []*Frame
			for range tt.frames {
				f, err := o.read(r, 0)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				got = append(got, f)
				if cap(o.buf) > maxKeptBuffer {
					t.Errorf("the opener keeps a %d-byte buffer, above %d", cap(o.buf), maxKeptBuffer)
				}
			}
			for i, f := range got {
				if f.ID != tt.frames[i].ID || !bytes.Equal(f.Data, tt.frames[i].Data) {
					t.Errorf("frame %d read back as id %d with %d bytes of data, want id %d with %d", i, f.ID, len(f.Data), tt.frames[i].ID, len(tt.frames[i].Data))
				}
			}
			if _, err := o.read(r, 0); !errors.Is(err, io.EOF) {
				t.Errorf("after the frames: %v, want io.EOF", err)
			}
		})
	}
}
