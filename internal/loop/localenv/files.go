package localenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"syscall"
	"unicode/utf8"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

const sniffLen = 8 << 10

// ErrTooLarge is wrapped by ReadFile errors for files above the size cap.
var ErrTooLarge = errors.New("file too large")

// ReadFile reads the lines selected by opts. Images are returned whole with
// MediaType set.
func (e *Env) ReadFile(ctx context.Context, p string, opts tool.ReadOptions) (*tool.FileContent, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	rel, err := e.resolve(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	// O_NONBLOCK: opening a FIFO must not hang; it is refused below.
	f, err := e.fsys.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, mapErr("read", p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, mapErr("read", p, err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("read %s: is a directory, use list_dir", p)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: not a regular file (%s)", p, st.Mode().Type())
	}
	limit := opts.MaxBytes
	if limit <= 0 {
		limit = e.cfg.maxReadBytes
	}
	if st.Size() > limit && (opts.Offset > 1 || opts.Limit > 0) {
		// A range of a large file: stream it, keeping only the selection.
		sel, total, binary, err := readRange(ctx, f, opts.Offset, opts.Limit, e.cfg.maxScanBytes)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		return &tool.FileContent{Content: sel, TotalLines: total, Size: st.Size(), Binary: binary}, nil
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("read %s: %w: %d bytes, the limit is %d bytes; read a range of lines with offset and limit or use a command", p, ErrTooLarge, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, mapErr("read", p, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("read %s: %w: grew above %d bytes while reading", p, ErrTooLarge, limit)
	}
	fc := &tool.FileContent{Size: int64(len(data)), TotalLines: countLines(data)}
	fc.Binary = looksBinary(data)
	if mt := imageType(data); mt != "" {
		fc.MediaType = mt
		fc.Binary = true
		fc.Content = data
		return fc, nil
	}
	fc.Content = selectLines(data, opts.Offset, opts.Limit)
	return fc, nil
}

func countLines(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	n := bytes.Count(b, []byte{'\n'})
	if b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// selectLines returns lines [offset, offset+limit) (1-based) verbatim.
func selectLines(b []byte, offset, limit int) []byte {
	if offset <= 1 && limit <= 0 {
		return b
	}
	if offset < 1 {
		offset = 1
	}
	start := 0
	for line := 1; line < offset; line++ {
		i := bytes.IndexByte(b[start:], '\n')
		if i < 0 {
			return []byte{}
		}
		start += i + 1
	}
	if limit <= 0 {
		return b[start:]
	}
	end := start
	for n := 0; n < limit && end < len(b); n++ {
		i := bytes.IndexByte(b[end:], '\n')
		if i < 0 {
			end = len(b)
			break
		}
		end += i + 1
	}
	return b[start:end]
}

// looksBinary reports NUL bytes or invalid UTF-8 in the first 8 KiB.
func looksBinary(b []byte) bool {
	if len(b) > sniffLen {
		b = b[:sniffLen]
		// Do not count a rune cut at the boundary as invalid.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0; i++ {
			r, _ := utf8.DecodeLastRune(b)
			if r != utf8.RuneError {
				break
			}
			b = b[:len(b)-1]
		}
	}
	return bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b)
}

func imageType(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}):
		return "image/jpeg"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "image/gif"
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}

// WriteFile writes content atomically (temporary file in the same directory,
// then rename), creating parent directories and keeping the mode of an
// existing file. A symlink at p is replaced by a regular file.
func (e *Env) WriteFile(ctx context.Context, p string, content []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	rel, err := e.resolve(p)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if rel == "." {
		return fmt.Errorf("write %s: is a directory", p)
	}
	mode := os.FileMode(0o644)
	keepMode := false
	if st, err := e.fsys.Stat(rel); err == nil {
		if st.IsDir() {
			return fmt.Errorf("write %s: is a directory", p)
		}
		mode, keepMode = st.Mode().Perm(), true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return mapErr("write", p, err)
	}
	dir := filepath.Dir(rel)
	if dir != "." {
		if err := e.fsys.MkdirAll(dir, 0o755); err != nil {
			return mapErr("write", p, err)
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, "."+filepath.Base(rel)+".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := e.fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return mapErr("write", p, err)
	}
	_, werr := f.Write(content)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil && keepMode {
		werr = e.fsys.Chmod(tmp, mode)
	}
	if werr == nil {
		werr = e.fsys.Rename(tmp, rel)
	}
	if werr != nil {
		_ = e.fsys.Remove(tmp)
		return mapErr("write", p, werr)
	}
	return nil
}

// DeleteFile removes a regular file (or symlink); directories are refused.
func (e *Env) DeleteFile(ctx context.Context, p string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", p, err)
	}
	rel, err := e.resolve(p)
	if err != nil {
		return fmt.Errorf("delete %s: %w", p, err)
	}
	st, err := e.fsys.Lstat(rel)
	if err != nil {
		return mapErr("delete", p, err)
	}
	if st.IsDir() {
		return fmt.Errorf("delete %s: is a directory", p)
	}
	return mapErr("delete", p, e.fsys.Remove(rel))
}

// FileExists reports whether p exists (following symlinks inside the root).
func (e *Env) FileExists(ctx context.Context, p string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("stat %s: %w", p, err)
	}
	rel, err := e.resolve(p)
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", p, err)
	}
	_, err = e.fsys.Stat(rel)
	if err == nil {
		return true, nil
	}
	if err = mapErr("stat", p, err); errors.Is(err, tool.ErrNotFound) {
		return false, nil
	}
	return false, err
}

// ListDirectory lists p down to depth levels (depth < 1 means 1). Names are
// slash-separated and relative to p; directories are listed before their
// contents, each level sorted by name. Symlinks are not followed.
func (e *Env) ListDirectory(ctx context.Context, p string, depth int) ([]tool.DirEntry, error) {
	if depth < 1 {
		depth = 1
	}
	rel, err := e.resolve(p)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p, err)
	}
	st, err := e.fsys.Stat(rel)
	if err != nil {
		return nil, mapErr("list", p, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("list %s: not a directory", p)
	}
	fsys := e.fsys.FS()
	out := []tool.DirEntry{}
	var walk func(dir, prefix string, level int) error
	walk = func(dir, prefix string, level int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		ents, err := fs.ReadDir(fsys, filepath.ToSlash(dir))
		if err != nil {
			return err
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
		for _, de := range ents {
			name := path.Join(prefix, de.Name())
			ent := tool.DirEntry{Name: name, IsDir: de.IsDir()}
			if !de.IsDir() {
				if info, err := de.Info(); err == nil {
					ent.Size = info.Size()
				}
			}
			out = append(out, ent)
			if de.IsDir() && level < depth {
				if err := walk(path.Join(dir, de.Name()), name, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(filepath.ToSlash(rel), "", 1); err != nil {
		return nil, mapErr("list", p, err)
	}
	return out, nil
}
