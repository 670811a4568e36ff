package tool

import (
	"context"
	"path"
)

// Scoped returns env with its relative paths and default command directory
// resolved against dir: a relative dir is taken inside env's working
// directory, an absolute one as is. Absolute paths pass through unchanged,
// and env still confines every path to its own root.
func Scoped(env ExecutionEnvironment, dir string) ExecutionEnvironment {
	if !path.IsAbs(dir) {
		dir = path.Join(env.WorkingDirectory(), dir)
	}
	return &scoped{ExecutionEnvironment: env, dir: dir}
}

// scoped is the environment Scoped returns.
type scoped struct {
	ExecutionEnvironment
	dir string
}

func (e *scoped) abs(p string) string {
	if p == "" {
		return e.dir
	}
	if path.IsAbs(p) {
		return p
	}
	return path.Join(e.dir, p)
}

func (e *scoped) WorkingDirectory() string { return e.dir }

func (e *scoped) ReadFile(ctx context.Context, p string, o ReadOptions) (*FileContent, error) {
	return e.ExecutionEnvironment.ReadFile(ctx, e.abs(p), o)
}

func (e *scoped) WriteFile(ctx context.Context, p string, c []byte) error {
	return e.ExecutionEnvironment.WriteFile(ctx, e.abs(p), c)
}

func (e *scoped) DeleteFile(ctx context.Context, p string) error {
	return e.ExecutionEnvironment.DeleteFile(ctx, e.abs(p))
}

func (e *scoped) FileExists(ctx context.Context, p string) (bool, error) {
	return e.ExecutionEnvironment.FileExists(ctx, e.abs(p))
}

func (e *scoped) ListDirectory(ctx context.Context, p string, depth int) ([]DirEntry, error) {
	return e.ExecutionEnvironment.ListDirectory(ctx, e.abs(p), depth)
}

func (e *scoped) ExecCommand(ctx context.Context, cmd string, o ExecOptions) (*ExecResult, error) {
	o.WorkingDir = e.abs(o.WorkingDir)
	return e.ExecutionEnvironment.ExecCommand(ctx, cmd, o)
}

func (e *scoped) Grep(ctx context.Context, pattern, p string, o GrepOptions) (*GrepResult, error) {
	return e.ExecutionEnvironment.Grep(ctx, pattern, e.abs(p), o)
}

func (e *scoped) Glob(ctx context.Context, pattern, p string) ([]string, error) {
	return e.ExecutionEnvironment.Glob(ctx, pattern, e.abs(p))
}
