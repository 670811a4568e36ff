package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

func FuzzDecodeFrame(f *testing.F) {
	f.Add(frameBytes(`{"kind":"hello","body":{"version":1}}`))
	f.Add(frameBytes(`{"id":1,"kind":"call","op":"read_file","body":{"path":"a"}}`))
	f.Add(frameBytes(`{"id":1,"kind":"call","op":"exec","body":{"command":"ls"},"owner":{"sessionUID":"s-1","holder":"h","epoch":2}}`))
	f.Add(frameBytes(`{"id":1,"kind":"call","op":"read_file","owner":{"sessionUID":"s-1","holder":"\u003c\u2028","epoch":-1,"x":1}}`))
	f.Add(frameBytes(`{"id":1,"kind":"call","op":"glob","owner":null}`))
	f.Add(frameBytes(`{"id":1,"kind":"call","op":"glob","owner":{}}`))
	f.Add(frameBytes(`{"kind":"hello","body":{"version":2,"features":["call_owner"],"featuresProof":"AAAA"}}`))
	f.Add(frameBytes(`{"kind":"hello","body":{"version":2,"features":["call_owner","stream_limit"],"featuresProof":"AAAA"}}`))
	f.Add(frameBytes(`{"id":1,"kind":"call","op":"exec","body":{"command":"yes","stream":true,"streamLimit":-1}}`))
	f.Add(frameBytes(`{"id":2,"kind":"output","data":"aGVsbG8="}`))
	f.Add(frameBytes(`{"id":3,"kind":"error","error":{"code":"x","message":"y"}}`))
	f.Add(frameBytes(`{"id":7,"kind":1}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Add([]byte{0, 0, 0})
	f.Add(append(frameBytes(`{"id":4,"kind":"cancel"}`), frameBytes(`{"kind":"hello"}`)...))
	for _, tt := range encodingCases() {
		if enc, err := EncodeFrame(tt.frame, 1<<16); err == nil {
			f.Add(enc)
		}
	}
	key := bytes.Repeat([]byte{4}, KeySize)
	const max = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for range 8 {
			fr, err := ReadFrame(r, max)
			if err != nil {
				if recoverable(err) {
					continue // the stream stays in sync
				}
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("ReadFrame over bytes returned an unexpected error: %v", err)
				}
				return
			}
			// A decoded frame re-encodes to the bytes json.Marshal gives,
			// and to a frame that decodes identically, plain and sealed.
			enc, err := EncodeFrame(fr, 0)
			if err != nil {
				t.Fatalf("EncodeFrame of a decoded frame: %v", err)
			}
			if ref, err := referenceEncodeFrame(fr); err != nil || !bytes.Equal(enc, ref) {
				t.Fatalf("EncodeFrame differs from json.Marshal (%v):\n%q\n%q", err, enc, ref)
			}
			back, err := ReadFrame(bytes.NewReader(enc), 0)
			if err != nil {
				t.Fatalf("round trip: %v", err)
			}
			a, _ := json.Marshal(fr)
			b, _ := json.Marshal(back)
			if !bytes.Equal(a, b) {
				t.Fatalf("round trip changed the frame:\n%s\n%s", a, b)
			}
			canon, err := canonicalBody(fr)
			if err != nil {
				t.Fatalf("canonicalBody of a decoded frame: %v", err)
			}
			var wire bytes.Buffer
			if err := (&sealer{key: key, dir: serverToClient}).write(&wire, canon, 0); err != nil {
				t.Fatalf("seal a decoded frame: %v", err)
			}
			opened, err := (&opener{key: key, dir: serverToClient}).read(&wire, 0)
			if err != nil {
				t.Fatalf("sealed round trip: %v", err)
			}
			if c, _ := json.Marshal(opened); !bytes.Equal(a, c) {
				t.Fatalf("sealed round trip changed the frame:\n%s\n%s", a, c)
			}
		}
	})
}
