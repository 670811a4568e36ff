package localenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Defaults used when an option or request leaves a value unset.
const (
	DefaultTimeout      = 10 * time.Second
	DefaultKillGrace    = 2 * time.Second
	DefaultMaxReadBytes = 10 << 20 // 10 MiB
	DefaultMaxOutput    = 16 << 20 // per stream
	defaultMaxResults   = 100
)

// Env is a tool.ExecutionEnvironment on the local machine. It is safe for
// concurrent use.
type Env struct {
	root      string   // absolute, cleaned, as given
	canonRoot string   // root with symlinks resolved
	fsys      *os.Root // root of all file operations ("/" when not confined)
	fsysBase  string   // directory fsys is opened on
	cfg       config
	cas       casLocks // serializes WriteFileIf per path
}

var _ tool.ExecutionEnvironment = (*Env)(nil)

type config struct {
	confine      bool
	policy       tool.EnvPolicy
	baseEnv      []string
	baseEnvSet   bool
	maxReadBytes int64
	maxScanBytes int64
	maxOutput    int
	killGrace    time.Duration
	shell        string
	useRipgrep   bool
}

// Option configures an Env.
type Option func(*config)

// WithConfinement turns confinement of file paths to the root on or off
// (default on). Commands are never confined, but their working directory is.
func WithConfinement(on bool) Option { return func(c *config) { c.confine = on } }

// WithEnvPolicy selects which variables of the base environment commands
// inherit (default tool.EnvInheritCore). Sensitive variables are always
// excluded.
func WithEnvPolicy(p tool.EnvPolicy) Option { return func(c *config) { c.policy = p } }

// WithBaseEnv replaces the process environment (os.Environ) as the base that
// the policy filters, in "KEY=value" form. The executor in a pod passes its
// own.
func WithBaseEnv(env []string) Option {
	return func(c *config) { c.baseEnv = append([]string(nil), env...); c.baseEnvSet = true }
}

// WithMaxReadBytes sets the default size cap of ReadFile (default 10 MiB).
func WithMaxReadBytes(n int64) Option { return func(c *config) { c.maxReadBytes = n } }

// WithMaxScanBytes caps the selected bytes of a ranged read of a file above
// the read cap (default DefaultMaxScanBytes, 2 MiB).
func WithMaxScanBytes(n int64) Option { return func(c *config) { c.maxScanBytes = n } }

// WithMaxOutput caps the bytes kept per output stream of a command (default
// 16 MiB); later output is dropped and a marker appended.
func WithMaxOutput(n int) Option { return func(c *config) { c.maxOutput = n } }

// WithKillGrace sets the time between SIGTERM and SIGKILL (default 2 s).
func WithKillGrace(d time.Duration) Option { return func(c *config) { c.killGrace = d } }

// WithShell sets the shell used as `shell -c command` (default /bin/bash,
// falling back to /bin/sh when bash is missing).
func WithShell(path string) Option { return func(c *config) { c.shell = path } }

// WithRipgrep allows or forbids using rg for Grep when it is on PATH
// (default allowed).
func WithRipgrep(on bool) Option { return func(c *config) { c.useRipgrep = on } }

// New returns an Env whose working directory is root, which must be an
// existing directory.
func New(root string, opts ...Option) (*Env, error) {
	cfg := config{
		confine:      true,
		policy:       tool.EnvInheritCore,
		maxReadBytes: DefaultMaxReadBytes,
		maxScanBytes: DefaultMaxScanBytes,
		maxOutput:    DefaultMaxOutput,
		killGrace:    DefaultKillGrace,
		useRipgrep:   true,
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch cfg.policy {
	case tool.EnvInheritCore, tool.EnvInheritAll, tool.EnvInheritNone:
	case "":
		cfg.policy = tool.EnvInheritCore
	default:
		return nil, fmt.Errorf("new local environment: unknown env policy %q", cfg.policy)
	}
	if cfg.shell == "" {
		cfg.shell = defaultShell()
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("new local environment: %w", err)
	}
	canon, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("new local environment: resolve root: %w", err)
	}
	st, err := os.Stat(canon)
	if err != nil {
		return nil, fmt.Errorf("new local environment: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("new local environment: root %s is not a directory", abs)
	}
	base := canon
	if !cfg.confine {
		base = "/"
	}
	r, err := os.OpenRoot(base)
	if err != nil {
		return nil, fmt.Errorf("new local environment: open root: %w", err)
	}
	return &Env{root: abs, canonRoot: canon, fsys: r, fsysBase: base, cfg: cfg}, nil
}

func defaultShell() string {
	if _, err := os.Stat("/bin/bash"); err == nil {
		return "/bin/bash"
	}
	return "/bin/sh"
}

// Close releases the root directory handle. The Env must not be used after.
func (e *Env) Close() error { return e.fsys.Close() }

// Initialize checks that the root is still a directory.
func (e *Env) Initialize(ctx context.Context) error {
	st, err := e.fsys.Stat(".")
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("initialize: root %s is not a directory", e.root)
	}
	return nil
}

// Cleanup does nothing: commands do not outlive their ExecCommand call. Use
// Close to release the root handle.
func (e *Env) Cleanup(ctx context.Context) error { return nil }

// WorkingDirectory returns the absolute root.
func (e *Env) WorkingDirectory() string { return e.root }

// Platform returns runtime.GOOS.
func (e *Env) Platform() string { return runtime.GOOS }

// OSVersion returns the distribution name (from /etc/os-release) and kernel
// release.
func (e *Env) OSVersion() string {
	var parts []string
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				parts = append(parts, strings.Trim(v, `"'`))
			}
		}
	}
	var u syscall.Utsname
	if err := syscall.Uname(&u); err == nil {
		parts = append(parts, utsString(u.Sysname[:])+" "+utsString(u.Release[:])+" "+utsString(u.Machine[:]))
	}
	if len(parts) == 0 {
		return runtime.GOOS + "/" + runtime.GOARCH
	}
	return strings.Join(parts, "; ")
}

func utsString[T int8 | uint8](b []T) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// resolve turns a caller's path into a slash-free relative name for e.fsys
// ("." for the base itself). With confinement it refuses paths outside the
// root, including through symlinks of existing ancestors.
func (e *Env) resolve(p string) (string, error) {
	if p == "" {
		p = "."
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	var abs string
	if filepath.IsAbs(p) {
		abs = filepath.Clean(p)
	} else {
		abs = filepath.Join(e.canonRoot, p)
	}
	if !e.cfg.confine {
		rel := strings.TrimPrefix(abs, "/")
		if rel == "" {
			rel = "."
		}
		return rel, nil
	}
	rel, ok := within(e.canonRoot, abs)
	if !ok && filepath.IsAbs(p) {
		rel, ok = within(e.root, abs)
	}
	if !ok {
		return "", fmt.Errorf("%s: %w", p, tool.ErrPathEscapes)
	}
	// Clear error for symlinks leaving the root; e.fsys enforces it again
	// race-free at open time.
	if err := e.checkSymlinks(p, rel); err != nil {
		return "", err
	}
	return rel, nil
}

// within returns target relative to base when target is base or below it.
func within(base, target string) (string, bool) {
	rel, err := filepath.Rel(base, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// checkSymlinks resolves rel component by component from the root,
// following symlinks (also dangling ones) the way the kernel would, and
// refuses the path when any step leaves the root.
func (e *Env) checkSymlinks(orig, rel string) error {
	real, err := resolveLinks(e.canonRoot, rel)
	if err != nil {
		return fmt.Errorf("%s: %w", orig, err)
	}
	if _, ok := within(e.canonRoot, real); !ok {
		return fmt.Errorf("%s resolves to %s: %w", orig, real, tool.ErrPathEscapes)
	}
	return nil
}

// resolveLinks returns the host path that base/rel designates after
// following symlinks; components that do not exist are appended lexically.
func resolveLinks(base, rel string) (string, error) {
	pending := strings.Split(filepath.ToSlash(rel), "/")
	cur := base
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		st, err := os.Lstat(next)
		if err != nil {
			// Missing (or not a directory): the rest is lexical.
			return filepath.Join(append([]string{next}, pending...)...), nil
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		links++
		if links > 40 {
			return "", fmt.Errorf("too many levels of symbolic links")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		pending = append(strings.Split(filepath.ToSlash(target), "/"), pending...)
	}
	return cur, nil
}

// abs returns the host path of a resolved name.
func (e *Env) abs(rel string) string { return filepath.Join(e.fsysBase, rel) }

// display returns the path shown to callers for a resolved name: relative to
// the root when inside it, absolute otherwise.
func (e *Env) display(rel string) string {
	a := e.abs(rel)
	if r, ok := within(e.canonRoot, a); ok {
		return filepath.ToSlash(r)
	}
	return a
}

// mapErr turns os errors into the contract's sentinel errors.
func mapErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, tool.ErrPathEscapes), errors.Is(err, tool.ErrNotFound):
		return fmt.Errorf("%s %s: %w", op, p, err)
	case isEscape(err):
		return fmt.Errorf("%s %s: %w", op, p, tool.ErrPathEscapes)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s %s: %w", op, p, tool.ErrNotFound)
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// isEscape recognises os.Root's unexported escape error.
func isEscape(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return strings.Contains(pe.Err.Error(), "path escapes from parent")
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return strings.Contains(le.Err.Error(), "path escapes from parent")
	}
	return strings.Contains(err.Error(), "path escapes from parent")
}
