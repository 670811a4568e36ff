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
	f.Add(frameBytes(`{"id":2,"kind":"output","data":"aGVsbG8="}`))
	f.Add(frameBytes(`{"id":3,"kind":"error","error":{"code":"x","message":"y"}}`))
	f.Add(frameBytes(`{"id":7,"kind":1}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Add([]byte{0, 0, 0})
	f.Add(append(frameBytes(`{"id":4,"kind":"cancel"}`), frameBytes(`{"kind":"hello"}`)...))
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
			// A decoded frame re-encodes to a frame that decodes identically.
			enc, err := EncodeFrame(fr, 0)
			if err != nil {
				t.Fatalf("EncodeFrame of a decoded frame: %v", err)
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
		}
	})
}
