package changes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Paths inside the workspace root.
const (
	// privateDir holds the operator's own git directory when the workspace
	// is not a git repository (see baseline).
	privateDir = ".agent-operator"
	// baseRef is the ref of the baseline commit.
	baseRef = "refs/agent-operator/base"
	// gitTimeout bounds one git command in the workspace.
	gitTimeout = 5 * time.Minute
	// chunkBytes is how much of a file one ReadFile transfers (the executor's
	// frames are 32 MiB of JSON at most).
	chunkBytes = 8 << 20
)

// gitOptions keep the workspace's own configuration from changing what is
// recorded: no hooks, no signing, no external diff or text conversion,
// standard prefixes.
var gitOptions = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "commit.gpgSign=false",
	"-c", "diff.noprefix=false",
	"-c", "diff.mnemonicPrefix=false",
	"-c", "diff.relative=false",
	"-c", "core.quotePath=true",
	// The workspace's mount point is owned by root, the workspace user is
	// not: without this git refuses the repository ("dubious ownership").
	"-c", "safe.directory=*",
	// No housekeeping after a commit: "git maintenance run --auto" is one
	// more git process on the session's start (the baseline's commit).
	"-c", "maintenance.auto=false",
	"-c", "gc.auto=0",
}

// repo runs git in the workspace of one session.
type repo struct {
	env tool.ExecutionEnvironment
	// private is set when the workspace is not a git repository: git then
	// runs with the operator's git directory under privateDir.
	private bool
	// scratch is a directory for temporary files, relative to the root and
	// inside the git directory (never part of the work tree).
	scratch string
	// budget bounds what readFile holds with the other recordings' reads
	// (nil: unbounded).
	budget *bytesBudget
}

// quote quotes s for the POSIX shell.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// command is the shell command line of git args.
func (r *repo) command(args ...string) string {
	var b strings.Builder
	b.WriteString("git")
	if r.private {
		b.WriteString(" --git-dir=" + quote(privateDir+"/git") + " --work-tree=.")
	}
	for _, a := range gitOptions {
		b.WriteString(" " + quote(a))
	}
	for _, a := range args {
		b.WriteString(" " + quote(a))
	}
	return b.String()
}

// sh runs a shell command line at the workspace root and returns its stdout;
// a non-zero exit is an error carrying stderr.
func (r *repo) sh(ctx context.Context, line string, env map[string]string) (string, error) {
	res, err := r.exec(ctx, firstWords(line), line, env)
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return res.Stdout, &gitError{cmd: firstWords(line), code: res.ExitCode, stderr: strings.TrimSpace(res.Stderr)}
	}
	return res.Stdout, nil
}

// exec runs a shell command line at the workspace root with git's
// environment plus env, in one round trip; name names it in errors. A
// non-zero exit is a result, not an error.
func (r *repo) exec(ctx context.Context, name, line string, env map[string]string) (*tool.ExecResult, error) {
	res, err := r.env.ExecCommand(ctx, line, tool.ExecOptions{Timeout: gitTimeout, WorkingDir: r.env.WorkingDirectory(), Env: gitEnv(env)})
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", name, err)
	}
	if res.TimedOut {
		return nil, fmt.Errorf("run %s: timed out after %s", name, gitTimeout)
	}
	return res, nil
}

// gitEnv is the environment of the operator's git commands, with env on
// top. Neither the system's nor $HOME's git configuration applies (HOME is
// /workspace in the pod: the agent writes it).
func gitEnv(env map[string]string) map[string]string {
	e := map[string]string{"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
	maps.Copy(e, env)
	return e
}

// git runs one git command.
func (r *repo) git(ctx context.Context, env map[string]string, args ...string) (string, error) {
	return r.sh(ctx, r.command(args...), env)
}

// gitError is a git command that exited non-zero.
type gitError struct {
	cmd    string
	code   int
	stderr string
}

func (e *gitError) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("%s: exit code %d", e.cmd, e.code)
	}
	return fmt.Sprintf("%s: exit code %d: %s", e.cmd, e.code, e.stderr)
}

// firstWords names a command line in errors without its arguments.
func firstWords(line string) string {
	f := strings.Fields(line)
	var out []string
	for _, w := range f {
		w = strings.Trim(w, "'")
		if strings.HasPrefix(w, "-") || strings.Contains(w, "=") || w == "git" {
			continue
		}
		out = append(out, w)
		if len(out) == 1 {
			break
		}
	}
	return "git " + strings.Join(out, " ")
}

// openRepo looks at the workspace: a git repository at its root, or not
// (then the operator's private git directory is used).
func openRepo(ctx context.Context, env tool.ExecutionEnvironment) (*repo, error) {
	isGit, err := env.FileExists(ctx, ".git")
	if err != nil {
		return nil, fmt.Errorf("look for .git: %w", err)
	}
	r := &repo{env: env, private: !isGit, scratch: ".git/agent-operator"}
	if r.private {
		r.scratch = privateDir + "/git/agent-operator"
	}
	return r, nil
}

// revParse resolves rev to a commit id; ok is false when it does not exist.
func (r *repo) revParse(ctx context.Context, rev string) (string, bool, error) {
	out, err := r.git(ctx, nil, "rev-parse", "-q", "--verify", rev+"^{commit}")
	if err != nil {
		if ge, isGit := err.(*gitError); isGit && ge.code == 1 {
			return "", false, nil
		}
		return "", false, err
	}
	return strings.TrimSpace(out), true, nil
}

// readFile reads a file of the workspace (relative to the root) whole, in
// chunks the executor can carry. size is what the workspace reported
// (fileSize): it must be within 0..limit before anything is allocated or
// read, and the read fails as soon as the workspace delivers more bytes than
// it claimed, or fewer. The bytes are held from r.budget first; the caller
// calls release once it no longer needs them.
func (r *repo) readFile(ctx context.Context, name string, size, limit int64) (data []byte, release func(), err error) {
	if size < 0 || size > limit {
		return nil, nil, fmt.Errorf("read %s: the workspace reports %d bytes, outside the limit of 0 to %d bytes", name, size, limit)
	}
	release, err = r.budget.hold(ctx, size)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", name, err)
	}
	data, err = r.readHeld(ctx, name, size)
	if err != nil {
		release()
		return nil, nil, err
	}
	return data, release, nil
}

// readHeld is readFile once size is checked and held.
func (r *repo) readHeld(ctx context.Context, name string, size int64) ([]byte, error) {
	if size <= chunkBytes {
		fc, err := r.env.ReadFile(ctx, name, tool.ReadOptions{MaxBytes: chunkBytes + 1})
		if err != nil {
			return nil, err
		}
		if err := checkChunk(name, len(fc.Content), size); err != nil {
			return nil, err
		}
		return fc.Content, nil
	}
	out := make([]byte, 0, size) // within the limit, checked above
	part := path.Join(path.Dir(name), "part")
	for off := int64(0); off < size; off += chunkBytes {
		want := min(chunkBytes, size-off)
		line := fmt.Sprintf("tail -c +%d %s | head -c %d > %s", off+1, quote(name), want, quote(part))
		if _, err := r.sh(ctx, line, nil); err != nil {
			return nil, fmt.Errorf("cut %s: %w", name, err)
		}
		fc, err := r.env.ReadFile(ctx, part, tool.ReadOptions{MaxBytes: chunkBytes + 1})
		if err != nil {
			return nil, err
		}
		if err := checkChunk(name, len(fc.Content), want); err != nil {
			return nil, fmt.Errorf("at byte %d: %w", off, err)
		}
		out = append(out, fc.Content...)
	}
	return out, nil
}

// checkChunk compares the bytes one read of name delivered with the want
// it asked for.
func checkChunk(name string, got int, want int64) error {
	switch {
	case int64(got) > want:
		return fmt.Errorf("read %s: the workspace delivered more bytes than the %d it reported; stopped", name, want)
	case int64(got) < want:
		return fmt.Errorf("read %s: got %d bytes of the %d the workspace reported", name, got, want)
	}
	return nil
}

// fileSize is the size of a workspace file in bytes, as wc -c in the
// workspace prints it (see parseSize). The workspace may lie: callers
// compare it with their limit and readFile checks it against the bytes
// delivered.
func (r *repo) fileSize(ctx context.Context, name string) (int64, error) {
	out, err := r.sh(ctx, "wc -c < "+quote(name), nil)
	if err != nil {
		return 0, err
	}
	n, err := parseSize(out)
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", name, err)
	}
	return n, nil
}

// parseSize parses a byte count printed by wc -c: decimal digits only,
// with surrounding white space (some wc pad it), fitting an int64.
// Anything else (a sign, a fraction, a suffix, an exponent, several
// numbers) is an error quoting the first bytes of out.
func parseSize(out string) (int64, error) {
	s := strings.TrimSpace(out)
	shown := out
	if len(shown) > 40 {
		shown = shown[:40] + "..."
	}
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("the workspace answered %q, not a byte count", shown)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the workspace answered %q, not a byte count: %w", shown, errors.Unwrap(err))
	}
	return n, nil
}
