package executor

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// benchFrames are frames of the sizes a session sends most: a small call, a
// small read_file result and a chunk of streamed output.
func benchFrames() []struct {
	name  string
	frame *Frame
} {
	return []struct {
		name  string
		frame *Frame
	}{
		{"call", &Frame{ID: 42, Kind: KindCall, Op: OpReadFile, Body: mustJSON(ReadArgs{Path: "src/main.go", Limit: 200})}},
		{"result", &Frame{ID: 42, Kind: KindResult, Body: mustJSON(FileContent{Content: []byte(strings.Repeat("func main() {}\n", 40)), TotalLines: 40, Size: 600})}},
		{"output", &Frame{ID: 42, Kind: KindOutput, Data: []byte(strings.Repeat("ok  \tpkg\t0.01s\n", 256))}},
	}
}

// BenchmarkReadFileRoundTrip is one small read_file through a client and a
// server joined by in-memory pipes: both ends' encoding, authentication,
// decoding and the file read itself.
func BenchmarkReadFileRoundTrip(b *testing.B) {
	s := serve(b, ServeOptions{})
	c := newClient(b, s)
	ctx := b.Context()
	if err := c.WriteFile(ctx, "small.go", []byte(strings.Repeat("func main() {}\n", 40))); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		fc, err := c.ReadFile(ctx, "small.go", tool.ReadOptions{})
		if err != nil || fc.TotalLines != 40 {
			b.Fatalf("ReadFile = %+v, %v", fc, err)
		}
	}
}

// BenchmarkFileExistsRoundTrip is the smallest call: a stat.
func BenchmarkFileExistsRoundTrip(b *testing.B) {
	s := serve(b, ServeOptions{})
	c := newClient(b, s)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := c.FileExists(ctx, "nope"); ok || err != nil {
			b.Fatalf("FileExists = %v, %v", ok, err)
		}
	}
}

func BenchmarkEncodeFrame(b *testing.B) {
	for _, tt := range benchFrames() {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeFrame(tt.frame, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeFrame(b *testing.B) {
	for _, tt := range benchFrames() {
		b.Run(tt.name, func(b *testing.B) {
			enc, err := EncodeFrame(tt.frame, 0)
			if err != nil {
				b.Fatal(err)
			}
			r := bytes.NewReader(enc)
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(enc)
				if _, err := ReadFrame(r, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSealOpen is one authenticated frame written by a sealer and read
// back by an opener, as on the stream after the handshake.
func BenchmarkSealOpen(b *testing.B) {
	key := bytes.Repeat([]byte{9}, KeySize)
	for _, tt := range benchFrames() {
		b.Run(tt.name, func(b *testing.B) {
			s := &sealer{key: key, dir: serverToClient}
			o := &opener{key: key, dir: serverToClient}
			var wire bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				wire.Reset()
				if err := sealTo(s, &wire, tt.frame); err != nil {
					b.Fatal(err)
				}
				f, err := o.read(&wire, 0)
				if err != nil || f.ID != tt.frame.ID {
					b.Fatalf("read = %+v, %v", f, err)
				}
			}
		})
	}
}

// sealTo writes f sealed by s to w, the way the client and server send.
func sealTo(s *sealer, w io.Writer, f *Frame) error { return s.write(w, f, 0) }

// BenchmarkSeal is the sending half of BenchmarkSealOpen: one frame encoded,
// authenticated and written.
func BenchmarkSeal(b *testing.B) {
	key := bytes.Repeat([]byte{9}, KeySize)
	for _, tt := range benchFrames() {
		b.Run(tt.name, func(b *testing.B) {
			s := &sealer{key: key, dir: serverToClient}
			b.ReportAllocs()
			for b.Loop() {
				if err := sealTo(s, io.Discard, tt.frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
