package tool

import (
	"context"
	"errors"
	"time"
)

// ExecutionEnvironment is where tools run (seed 000 §4). Paths may be absolute
// or relative to WorkingDirectory. Implementations that confine paths to a
// root return an error wrapping ErrPathEscapes for paths outside it.
// Every method honours ctx; ExecCommand on cancellation terminates the process
// group (SIGTERM, 2 s, SIGKILL) and returns the partial output.
type ExecutionEnvironment interface {
	// ReadFile reads a file. Offset and Limit select lines (1-based offset,
	// 0 = from the start / no limit) so large files need not be transferred.
	ReadFile(ctx context.Context, path string, opts ReadOptions) (*FileContent, error)
	// WriteFile writes content atomically, creating parent directories.
	WriteFile(ctx context.Context, path string, content []byte) error
	// DeleteFile removes a regular file.
	DeleteFile(ctx context.Context, path string) error
	// FileExists reports whether path exists.
	FileExists(ctx context.Context, path string) (bool, error)
	// ListDirectory lists path down to depth levels (1 = direct children).
	ListDirectory(ctx context.Context, path string, depth int) ([]DirEntry, error)
	// ExecCommand runs command with the platform shell in a new process group.
	ExecCommand(ctx context.Context, command string, opts ExecOptions) (*ExecResult, error)
	// Grep searches file contents under path with a regular expression.
	Grep(ctx context.Context, pattern, path string, opts GrepOptions) (*GrepResult, error)
	// Glob lists files matching pattern under path, newest modification first.
	Glob(ctx context.Context, pattern, path string) ([]string, error)

	Initialize(ctx context.Context) error
	Cleanup(ctx context.Context) error

	WorkingDirectory() string
	Platform() string  // "linux", "darwin", ...
	OSVersion() string // human-readable
}

// ErrPathEscapes is wrapped by errors for paths that resolve outside the
// environment's root (.., absolute paths elsewhere, symlinks).
var ErrPathEscapes = errors.New("path escapes the workspace root")

// ErrNotFound is wrapped by errors for missing files or directories.
var ErrNotFound = errors.New("no such file or directory")

// ReadOptions selects part of a file.
type ReadOptions struct {
	Offset   int   // 1-based first line; 0 means 1
	Limit    int   // max lines; 0 means all
	MaxBytes int64 // refuse (error) files larger than this; 0 means the implementation's cap
}

// FileContent is the result of ReadFile.
type FileContent struct {
	Content    []byte // the selected lines, verbatim (for images: the whole file)
	TotalLines int    // lines in the whole file
	Size       int64  // size of the whole file in bytes
	Binary     bool   // the file looks binary (NUL bytes or invalid UTF-8 in the first 8 KiB)
	MediaType  string // set for recognised images (image/png, image/jpeg, image/gif, image/webp)
}

// DirEntry is one entry of ListDirectory. Name is relative to the listed path.
type DirEntry struct {
	Name  string `json:"name"`
	IsDir bool   `json:"isDir"`
	Size  int64  `json:"size,omitempty"`
}

// EnvPolicy says which of the host's environment variables a command inherits.
type EnvPolicy string

// Environment policies (seed 000 §4).
const (
	EnvInheritCore EnvPolicy = "core" // default: core variables, minus sensitive ones
	EnvInheritAll  EnvPolicy = "all"  // everything except sensitive variables
	EnvInheritNone EnvPolicy = "none" // start clean
)

// ExecOptions configures one command.
type ExecOptions struct {
	Timeout    time.Duration     // 0 means the caller forgot: implementations use 10 s
	WorkingDir string            // empty means WorkingDirectory()
	Env        map[string]string // added on top of the inherited environment
	// OnOutput, if set, receives combined stdout/stderr chunks while the
	// command runs (for TOOL_CALL_OUTPUT_DELTA). It must not block for long.
	OnOutput func(chunk []byte)
}

// ExecResult is the outcome of ExecCommand. A non-zero exit is a result, not
// an error; errors are reserved for failures to run at all.
type ExecResult struct {
	Stdout   string        `json:"stdout"`
	Stderr   string        `json:"stderr"`
	ExitCode int           `json:"exitCode"`
	TimedOut bool          `json:"timedOut"`
	Duration time.Duration `json:"duration"`
}

// GrepOptions refines Grep.
type GrepOptions struct {
	GlobFilter      string // e.g. "*.py"
	CaseInsensitive bool
	MaxResults      int // 0 means 100
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// GrepResult holds matches in file order; Truncated is set when MaxResults cut it.
type GrepResult struct {
	Matches   []GrepMatch `json:"matches"`
	Truncated bool        `json:"truncated"`
}
