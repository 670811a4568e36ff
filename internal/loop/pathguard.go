package loop

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// DefaultDeniedPaths are the credential files the file tools refuse to
// read, write, list in glob results or search (issue 16). Pattern syntax
// (path.Match per segment, matched against the cleaned absolute path):
//   - "name" (no slash) matches the last segment: "*.pem", ".env";
//   - "dir/" matches a directory segment anywhere: ".ssh/";
//   - "a/b" matches the last segments: ".aws/credentials".
var DefaultDeniedPaths = []string{
	".ssh/", ".gnupg/",
	"*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
	".env", ".env.*", ".netrc", ".git-credentials", ".pgpass", ".npmrc", ".pypirc",
	".aws/credentials", ".aws/config", ".kube/config", ".docker/config.json",
	".config/gcloud/", ".azure/",
}

// DefaultAllowedPaths are exempt from the denials: templates that hold no
// secrets by convention.
var DefaultAllowedPaths = []string{".env.example", ".env.sample", ".env.template", "*.pub"}

// ErrDeniedPath is wrapped by file-tool errors for a denied path.
var ErrDeniedPath = errors.New("access denied by the session's file policy")

// pathRules decides which paths the file tools may touch.
type pathRules struct {
	deny, allow []string
}

func newPathRules(cfg SessionConfig) pathRules {
	r := pathRules{deny: append(append([]string(nil), DefaultDeniedPaths...), cfg.FileDenyPatterns...)}
	if cfg.FileAllowPatterns != nil {
		r.allow = cfg.FileAllowPatterns
	} else {
		r.allow = DefaultAllowedPaths
	}
	return r
}

// denied returns the deny pattern matching the absolute path p, or "".
func (r pathRules) denied(p string) string {
	segs := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	for _, a := range r.allow {
		if matchPathPattern(a, segs) {
			return ""
		}
	}
	for _, d := range r.deny {
		if matchPathPattern(d, segs) {
			return d
		}
	}
	return ""
}

func matchPathPattern(pat string, segs []string) bool {
	if dir, ok := strings.CutSuffix(pat, "/"); ok {
		for _, s := range segs[:len(segs)-1] {
			if m, _ := path.Match(dir, s); m {
				return true
			}
		}
		// The directory itself ("~/.ssh") is denied too.
		m, _ := path.Match(dir, segs[len(segs)-1])
		return m
	}
	ps := strings.Split(strings.Trim(pat, "/"), "/")
	if len(ps) > len(segs) {
		return false
	}
	tail := segs[len(segs)-len(ps):]
	for i, p := range ps {
		if m, _ := path.Match(p, tail[i]); !m {
			return false
		}
	}
	return true
}

// guardedEnv is the environment the file tools see: the session's, with
// denied paths refused (reads, writes, deletes) or left out (glob, grep,
// directory listings). Commands are not filtered: the denial keeps
// credentials out of the file tools' results, it is not a sandbox.
type guardedEnv struct {
	tool.ExecutionEnvironment
	rules pathRules
}

func (e *guardedEnv) abs(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(e.WorkingDirectory(), p)
	}
	return path.Clean(p)
}

func (e *guardedEnv) check(op, p string) error {
	if pat := e.rules.denied(e.abs(p)); pat != "" {
		return fmt.Errorf("%s %s: %w: the path matches the credential pattern %q; the file tools may not access credential files (use a non-secret file, or ask the operator to allow the path for this session)", op, p, ErrDeniedPath, pat)
	}
	return nil
}

func (e *guardedEnv) ReadFile(ctx context.Context, p string, o tool.ReadOptions) (*tool.FileContent, error) {
	if err := e.check("read", p); err != nil {
		return nil, err
	}
	return e.ExecutionEnvironment.ReadFile(ctx, p, o)
}

func (e *guardedEnv) WriteFile(ctx context.Context, p string, c []byte) error {
	if err := e.check("write", p); err != nil {
		return err
	}
	return e.ExecutionEnvironment.WriteFile(ctx, p, c)
}

func (e *guardedEnv) WriteFileIf(ctx context.Context, p string, c []byte, ifSHA256 string) error {
	if err := e.check("write", p); err != nil {
		return err
	}
	return tool.WriteFileIf(ctx, e.ExecutionEnvironment, p, c, ifSHA256)
}

func (e *guardedEnv) DeleteFile(ctx context.Context, p string) error {
	if err := e.check("delete", p); err != nil {
		return err
	}
	return e.ExecutionEnvironment.DeleteFile(ctx, p)
}

func (e *guardedEnv) ListDirectory(ctx context.Context, p string, depth int) ([]tool.DirEntry, error) {
	if err := e.check("list", p); err != nil {
		return nil, err
	}
	ents, err := e.ExecutionEnvironment.ListDirectory(ctx, p, depth)
	if err != nil {
		return nil, err
	}
	base := e.abs(p)
	kept := ents[:0]
	for _, en := range ents {
		if e.rules.denied(path.Join(base, en.Name)) == "" {
			kept = append(kept, en)
		}
	}
	return kept, nil
}

func (e *guardedEnv) Grep(ctx context.Context, pattern, p string, o tool.GrepOptions) (*tool.GrepResult, error) {
	if err := e.check("search", p); err != nil {
		return nil, err
	}
	res, err := e.ExecutionEnvironment.Grep(ctx, pattern, p, o)
	if err != nil || res == nil {
		return res, err
	}
	kept := res.Matches[:0]
	for _, m := range res.Matches {
		if e.rules.denied(e.abs(m.Path)) == "" {
			kept = append(kept, m)
		}
	}
	res.Matches = kept
	return res, nil
}

func (e *guardedEnv) Glob(ctx context.Context, pattern, p string) ([]string, error) {
	if err := e.check("search", p); err != nil {
		return nil, err
	}
	paths, err := e.ExecutionEnvironment.Glob(ctx, pattern, p)
	if err != nil {
		return nil, err
	}
	kept := paths[:0]
	for _, f := range paths {
		if e.rules.denied(e.abs(f)) == "" {
			kept = append(kept, f)
		}
	}
	return kept, nil
}
