package localenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func newEnv(t *testing.T, opts ...Option) (*Env, string) {
	t.Helper()
	dir := t.TempDir()
	e, err := New(dir, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e, dir
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	mustWrite(t, file, "x")
	for _, root := range []string{file, filepath.Join(dir, "missing")} {
		if _, err := New(root); err == nil {
			t.Errorf("New(%q) succeeded, want error", root)
		}
	}
	if _, err := New(dir, WithEnvPolicy("bogus")); err == nil {
		t.Error("New with unknown policy succeeded")
	}
}

func TestReadFile(t *testing.T) {
	e, dir := newEnv(t)
	mustWrite(t, filepath.Join(dir, "five.txt"), "l1\nl2\nl3\nl4\nl5\n")
	mustWrite(t, filepath.Join(dir, "noeol.txt"), "a\nb")
	mustWrite(t, filepath.Join(dir, "empty.txt"), "")
	mustWrite(t, filepath.Join(dir, "bin.dat"), "abc\x00def\n")
	mustWrite(t, filepath.Join(dir, "latin1.txt"), "caf\xe9\n")
	mustWrite(t, filepath.Join(dir, "img.png"), "\x89PNG\r\n\x1a\nrest")
	mustWrite(t, filepath.Join(dir, "img.gif"), "GIF89a...")
	mustWrite(t, filepath.Join(dir, "img.webp"), "RIFF\x00\x00\x00\x00WEBPVP8 ")
	mustWrite(t, filepath.Join(dir, "img.jpg"), "\xff\xd8\xff\xe0")
	// A multi-byte rune cut exactly at the 8 KiB sniff boundary is not binary.
	mustWrite(t, filepath.Join(dir, "utf8.txt"), strings.Repeat("a", sniffLen-1)+"é\n")

	tests := []struct {
		name       string
		path       string
		opts       tool.ReadOptions
		want       string
		totalLines int
		binary     bool
		media      string
	}{
		{"whole", "five.txt", tool.ReadOptions{}, "l1\nl2\nl3\nl4\nl5\n", 5, false, ""},
		{"offset", "five.txt", tool.ReadOptions{Offset: 4}, "l4\nl5\n", 5, false, ""},
		{"limit", "five.txt", tool.ReadOptions{Limit: 2}, "l1\nl2\n", 5, false, ""},
		{"offset and limit", "five.txt", tool.ReadOptions{Offset: 2, Limit: 2}, "l2\nl3\n", 5, false, ""},
		{"offset past end", "five.txt", tool.ReadOptions{Offset: 9}, "", 5, false, ""},
		{"absolute inside root", filepath.Join(dir, "five.txt"), tool.ReadOptions{Offset: 5}, "l5\n", 5, false, ""},
		{"no final newline", "noeol.txt", tool.ReadOptions{Offset: 2}, "b", 2, false, ""},
		{"empty", "empty.txt", tool.ReadOptions{}, "", 0, false, ""},
		{"nul byte", "bin.dat", tool.ReadOptions{}, "abc\x00def\n", 1, true, ""},
		{"invalid utf8", "latin1.txt", tool.ReadOptions{}, "caf\xe9\n", 1, true, ""},
		{"png", "img.png", tool.ReadOptions{Limit: 1}, "\x89PNG\r\n\x1a\nrest", 3, true, "image/png"},
		{"gif", "img.gif", tool.ReadOptions{}, "GIF89a...", 1, true, "image/gif"},
		{"webp", "img.webp", tool.ReadOptions{}, "RIFF\x00\x00\x00\x00WEBPVP8 ", 1, true, "image/webp"},
		{"jpeg", "img.jpg", tool.ReadOptions{}, "\xff\xd8\xff\xe0", 1, true, "image/jpeg"},
		{"rune at sniff boundary", "utf8.txt", tool.ReadOptions{Offset: 2}, "", 1, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc, err := e.ReadFile(t.Context(), tt.path, tt.opts)
			if err != nil {
				t.Fatalf("ReadFile: %v", err)
			}
			if string(fc.Content) != tt.want {
				t.Errorf("Content = %q, want %q", fc.Content, tt.want)
			}
			if fc.TotalLines != tt.totalLines {
				t.Errorf("TotalLines = %d, want %d", fc.TotalLines, tt.totalLines)
			}
			st, _ := os.Stat(filepath.Join(dir, filepath.Base(tt.path)))
			if fc.Size != st.Size() {
				t.Errorf("Size = %d, want %d", fc.Size, st.Size())
			}
			if fc.Binary != tt.binary {
				t.Errorf("Binary = %v, want %v", fc.Binary, tt.binary)
			}
			if fc.MediaType != tt.media {
				t.Errorf("MediaType = %q, want %q", fc.MediaType, tt.media)
			}
		})
	}
}

func TestReadFileErrors(t *testing.T) {
	e, dir := newEnv(t, WithMaxReadBytes(10))
	mustWrite(t, filepath.Join(dir, "big.txt"), strings.Repeat("x", 11))
	mustWrite(t, filepath.Join(dir, "small.txt"), "12345")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		opts    tool.ReadOptions
		wantIs  error
		wantMsg string
	}{
		{"default cap", "big.txt", tool.ReadOptions{}, ErrTooLarge, "11 bytes, the limit is 10"},
		{"request cap", "small.txt", tool.ReadOptions{MaxBytes: 4}, ErrTooLarge, "limit is 4"},
		{"missing", "nope.txt", tool.ReadOptions{}, tool.ErrNotFound, "nope.txt"},
		{"missing parent", "nope/x.txt", tool.ReadOptions{}, tool.ErrNotFound, "nope/x.txt"},
		{"directory", "sub", tool.ReadOptions{}, nil, "is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.ReadFile(t.Context(), tt.path, tt.opts)
			if err == nil {
				t.Fatal("ReadFile succeeded, want error")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v does not wrap %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tt.wantMsg)
			}
		})
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ReadFile(t.Context(), "fifo", tool.ReadOptions{}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("ReadFile(fifo) = %v, want not a regular file", err)
	}
	if _, err := e.Grep(t.Context(), "x", "fifo", tool.GrepOptions{}); err == nil {
		t.Error("Grep(fifo) succeeded")
	}
	// A larger request cap overrides the default.
	if _, err := e.ReadFile(t.Context(), "big.txt", tool.ReadOptions{MaxBytes: 100}); err != nil {
		t.Errorf("ReadFile with MaxBytes 100: %v", err)
	}
}

func TestWriteFile(t *testing.T) {
	e, dir := newEnv(t)
	ctx := t.Context()

	if err := e.WriteFile(ctx, "a/b/c.txt", []byte("hello")); err != nil {
		t.Fatalf("WriteFile new with parents: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "a/b/c.txt"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("content = %q, %v", got, err)
	}

	script := filepath.Join(dir, "run.sh")
	mustWrite(t, script, "old")
	if err := os.Chmod(script, 0o751); err != nil {
		t.Fatal(err)
	}
	if err := e.WriteFile(ctx, "run.sh", []byte("new")); err != nil {
		t.Fatalf("WriteFile existing: %v", err)
	}
	st, err := os.Stat(script)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o751 {
		t.Errorf("mode = %v, want 0751 kept", st.Mode().Perm())
	}
	if got, _ := os.ReadFile(script); string(got) != "new" {
		t.Errorf("content = %q, want new", got)
	}
	// No temporary files are left behind.
	ents, _ := os.ReadDir(dir)
	for _, de := range ents {
		if strings.Contains(de.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", de.Name())
		}
	}
	if err := e.WriteFile(ctx, "a", []byte("x")); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("WriteFile onto a directory: %v, want is a directory", err)
	}
	// Writing through a file used as a directory fails clearly.
	if err := e.WriteFile(ctx, "run.sh/x", []byte("x")); err == nil {
		t.Error("WriteFile under a regular file succeeded")
	}
}

func TestWriteFileIsAtomicForReaders(t *testing.T) {
	e, dir := newEnv(t)
	p := filepath.Join(dir, "f")
	mustWrite(t, p, "old content")
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := e.WriteFile(t.Context(), "f", []byte("new")); err != nil {
		t.Fatal(err)
	}
	// A reader that opened the old file still sees the old inode intact.
	buf := make([]byte, 64)
	n, _ := f.Read(buf)
	if string(buf[:n]) != "old content" {
		t.Errorf("old reader saw %q, want the old content (rename, not truncate)", buf[:n])
	}
}

func TestDeleteAndExists(t *testing.T) {
	e, dir := newEnv(t)
	ctx := t.Context()
	mustWrite(t, filepath.Join(dir, "f.txt"), "x")
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want bool
	}{{"f.txt", true}, {"d", true}, {".", true}, {"nope", false}, {"nope/deeper", false}, {"f.txt/under-file", false}} {
		got, err := e.FileExists(ctx, tc.path)
		if err != nil || got != tc.want {
			t.Errorf("FileExists(%q) = %v, %v; want %v", tc.path, got, err, tc.want)
		}
	}
	if err := e.DeleteFile(ctx, "d"); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("DeleteFile(dir) = %v, want is a directory", err)
	}
	if err := e.DeleteFile(ctx, "nope"); !errors.Is(err, tool.ErrNotFound) {
		t.Errorf("DeleteFile(missing) = %v, want ErrNotFound", err)
	}
	if err := e.DeleteFile(ctx, "f.txt"); err != nil {
		t.Fatalf("DeleteFile: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "f.txt")); !os.IsNotExist(err) {
		t.Errorf("file still exists after DeleteFile: %v", err)
	}
}

func TestListDirectory(t *testing.T) {
	e, dir := newEnv(t)
	mustWrite(t, filepath.Join(dir, "b.txt"), "12345")
	mustWrite(t, filepath.Join(dir, "a/x.go"), "x")
	mustWrite(t, filepath.Join(dir, "a/deep/y.go"), "yy")
	tests := []struct {
		path  string
		depth int
		want  []tool.DirEntry
	}{
		{".", 1, []tool.DirEntry{{Name: "a", IsDir: true}, {Name: "b.txt", Size: 5}}},
		{"", 0, []tool.DirEntry{{Name: "a", IsDir: true}, {Name: "b.txt", Size: 5}}},
		{".", 2, []tool.DirEntry{{Name: "a", IsDir: true}, {Name: "a/deep", IsDir: true}, {Name: "a/x.go", Size: 1}, {Name: "b.txt", Size: 5}}},
		{"a", 3, []tool.DirEntry{{Name: "deep", IsDir: true}, {Name: "deep/y.go", Size: 2}, {Name: "x.go", Size: 1}}},
	}
	for _, tt := range tests {
		got, err := e.ListDirectory(t.Context(), tt.path, tt.depth)
		if err != nil {
			t.Fatalf("ListDirectory(%q, %d): %v", tt.path, tt.depth, err)
		}
		if len(got) != len(tt.want) {
			t.Fatalf("ListDirectory(%q, %d) = %+v, want %+v", tt.path, tt.depth, got, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("ListDirectory(%q, %d)[%d] = %+v, want %+v", tt.path, tt.depth, i, got[i], tt.want[i])
			}
		}
	}
	if _, err := e.ListDirectory(t.Context(), "b.txt", 1); err == nil {
		t.Error("ListDirectory on a file succeeded")
	}
	if _, err := e.ListDirectory(t.Context(), "missing", 1); !errors.Is(err, tool.ErrNotFound) {
		t.Errorf("ListDirectory(missing) = %v, want ErrNotFound", err)
	}
}

func TestPathEscapes(t *testing.T) {
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "secret.txt"), "secret")
	e, dir := newEnv(t)
	mustWrite(t, filepath.Join(dir, "ok.txt"), "ok")
	if err := os.Symlink("/etc", filepath.Join(dir, "etc-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "outdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "new-file"), filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	// A symlink inside the root pointing inside the root is fine.
	if err := os.Symlink("ok.txt", filepath.Join(dir, "inside-link")); err != nil {
		t.Fatal(err)
	}
	escapes := []string{
		"..",
		"../x",
		"a/../../x",
		"/etc/passwd",
		outside + "/secret.txt",
		"passwd-link",
		"etc-link/passwd",
		"outdir/secret.txt",
		"outdir/new/file.txt",
		"dangling",
	}
	ctx := t.Context()
	ops := map[string]func(p string) error{
		"read":   func(p string) error { _, err := e.ReadFile(ctx, p, tool.ReadOptions{}); return err },
		"write":  func(p string) error { return e.WriteFile(ctx, p, []byte("pwned")) },
		"delete": func(p string) error { return e.DeleteFile(ctx, p) },
		"exists": func(p string) error { _, err := e.FileExists(ctx, p); return err },
		"list":   func(p string) error { _, err := e.ListDirectory(ctx, p, 1); return err },
		"grep":   func(p string) error { _, err := e.Grep(ctx, "x", p, tool.GrepOptions{}); return err },
		"glob":   func(p string) error { _, err := e.Glob(ctx, "*", p); return err },
		"exec wd": func(p string) error {
			_, err := e.ExecCommand(ctx, "true", tool.ExecOptions{WorkingDir: p})
			return err
		},
	}
	for name, op := range ops {
		for _, p := range escapes {
			if err := op(p); !errors.Is(err, tool.ErrPathEscapes) {
				t.Errorf("%s(%q) = %v, want ErrPathEscapes", name, p, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new-file")); !os.IsNotExist(err) {
		t.Error("write through a dangling symlink created a file outside the root")
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); !os.IsNotExist(err) {
		t.Error("write through a symlinked parent created a directory outside the root")
	}
	if got, _ := os.ReadFile(filepath.Join(outside, "secret.txt")); string(got) != "secret" {
		t.Error("file outside the root was modified")
	}
	fc, err := e.ReadFile(ctx, "inside-link", tool.ReadOptions{})
	if err != nil || string(fc.Content) != "ok" {
		t.Errorf("ReadFile(inside-link) = %v, %v; want ok", fc, err)
	}
}

func TestUnconfined(t *testing.T) {
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "f.txt"), "free")
	e, _ := newEnv(t, WithConfinement(false))
	fc, err := e.ReadFile(t.Context(), filepath.Join(outside, "f.txt"), tool.ReadOptions{})
	if err != nil || string(fc.Content) != "free" {
		t.Fatalf("ReadFile outside root without confinement = %v, %v", fc, err)
	}
	if err := e.WriteFile(t.Context(), "rel.txt", []byte("r")); err != nil {
		t.Fatalf("WriteFile relative: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(e.WorkingDirectory(), "rel.txt")); string(got) != "r" {
		t.Errorf("relative write went elsewhere: %q", got)
	}
}

func TestMetadata(t *testing.T) {
	e, dir := newEnv(t)
	if e.WorkingDirectory() != dir {
		t.Errorf("WorkingDirectory = %q, want %q", e.WorkingDirectory(), dir)
	}
	if e.Platform() != "linux" {
		t.Errorf("Platform = %q", e.Platform())
	}
	if !strings.Contains(e.OSVersion(), "Linux") {
		t.Errorf("OSVersion = %q, want a kernel name", e.OSVersion())
	}
	if err := e.Initialize(t.Context()); err != nil {
		t.Errorf("Initialize: %v", err)
	}
	if err := e.Cleanup(t.Context()); err != nil {
		t.Errorf("Cleanup: %v", err)
	}
}
