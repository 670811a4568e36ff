package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Operations.
const (
	OpReadFile      = "read_file"
	OpWriteFile     = "write_file"
	OpDeleteFile    = "delete_file"
	OpFileExists    = "file_exists"
	OpListDirectory = "list_directory"
	OpExec          = "exec"
	OpGrep          = "grep"
	OpGlob          = "glob"
	OpInitialize    = "initialize"
	OpCleanup       = "cleanup"
)

// Features a server announces in its hello (Hello.Features).
const (
	// FeatureCallOwner: the server checks the owner a call frame carries
	// (Frame.Owner, see the package doc, "Call owners").
	FeatureCallOwner = "call_owner"
	// FeatureStreamLimit: the server honours ExecArgs.StreamLimit, sending
	// no output frames of an exec call past that many bytes.
	FeatureStreamLimit = "stream_limit"
)

// features are the features this server has, in the order its hello
// announces them.
var features = []string{FeatureCallOwner, FeatureStreamLimit}

// Error codes of WireError.
const (
	CodePathEscapes   = "path_escapes"
	CodeNotFound      = "not_found"
	CodeTooLarge      = "too_large"       // file above the read cap
	CodeFrameTooLarge = "frame_too_large" // request or response above the frame limit
	CodeCanceled      = "canceled"
	CodeDeadline      = "deadline_exceeded"
	CodeBadRequest    = "bad_request"
	CodeBadFrame      = "bad_frame"
	CodeUnknownOp     = "unknown_op"
	CodeVersion       = "version"
	CodeInternal      = "internal"
	CodeFailed        = "failed"   // any other error of the environment
	CodeConflict      = "conflict" // conditional write: the file changed
	// CodeNotOwner (owner.go): the stream's driver was superseded.
)

// Hello is the body of hello frames.
type Hello struct {
	Version          int    `json:"version"`
	MaxFrame         int    `json:"maxFrame,omitempty"`
	WorkingDirectory string `json:"workingDirectory,omitempty"`
	Platform         string `json:"platform,omitempty"`
	OSVersion        string `json:"osVersion,omitempty"`
	// Features lists what the server accepts beyond the version's base
	// protocol (FeatureCallOwner); only a server's hello carries it. It is
	// proven by its own tag (serverHello.FeaturesProof), not by the hello's
	// proof, so clients that predate it still accept the hello.
	Features []string `json:"features,omitempty"`
}

// HasFeature reports whether the hello announces feature.
func (h Hello) HasFeature(feature string) bool {
	return slices.Contains(h.Features, feature)
}

// PathArgs is the body of write_file, delete_file, file_exists and
// list_directory calls.
type PathArgs struct {
	Path    string `json:"path"`
	Content []byte `json:"content,omitempty"` // write_file
	Depth   int    `json:"depth,omitempty"`   // list_directory
	// IfSHA256 makes a write_file conditional: it applies only if the
	// file's current SHA-256 (hex) is this value ("" = the file must not
	// exist); otherwise the call fails with CodeConflict.
	IfSHA256 *string `json:"ifSHA256,omitempty"`
}

// ReadArgs is the body of read_file calls.
type ReadArgs struct {
	Path     string `json:"path"`
	Offset   int    `json:"offset,omitempty"`
	Limit    int    `json:"limit,omitempty"`
	MaxBytes int64  `json:"maxBytes,omitempty"`
}

// FileContent is the result of read_file.
type FileContent struct {
	Content    []byte `json:"content"`
	TotalLines int    `json:"totalLines"`
	Size       int64  `json:"size"`
	Binary     bool   `json:"binary,omitempty"`
	MediaType  string `json:"mediaType,omitempty"`
}

// ExistsResult is the result of file_exists.
type ExistsResult struct {
	Exists bool `json:"exists"`
}

// ListResult is the result of list_directory.
type ListResult struct {
	Entries []tool.DirEntry `json:"entries"`
}

// ExecArgs is the body of exec calls.
type ExecArgs struct {
	Command    string            `json:"command"`
	Timeout    time.Duration     `json:"timeout,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Stream     bool              `json:"stream,omitempty"` // send output frames
	// StreamLimit, with Stream and on a server announcing
	// FeatureStreamLimit, is the most output bytes the call's output frames
	// carry in all; past it the server sends none (the command runs on and
	// its result, with the exit status and output, is sent as usual). 0 or
	// less: no limit. Servers that predate it ignore it.
	StreamLimit int64 `json:"streamLimit,omitempty"`
}

// GrepArgs is the body of grep calls.
type GrepArgs struct {
	Pattern         string `json:"pattern"`
	Path            string `json:"path,omitempty"`
	GlobFilter      string `json:"globFilter,omitempty"`
	CaseInsensitive bool   `json:"caseInsensitive,omitempty"`
	MaxResults      int    `json:"maxResults,omitempty"`
}

// GlobArgs is the body of glob calls.
type GlobArgs struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
}

// GlobResult is the result of glob.
type GlobResult struct {
	Paths []string `json:"paths"`
}

// RemoteError is an error reported by the other side. It unwraps to the
// sentinel error matching its code (tool.ErrPathEscapes, tool.ErrNotFound,
// localenv.ErrTooLarge, ErrFrameTooLarge, context.Canceled,
// context.DeadlineExceeded, ErrNotOwner, ...), so errors.Is works across the
// stream.
type RemoteError struct {
	Code    string
	Message string
	// Owner is the session's current driver, on a CodeNotOwner refusal by
	// a newer driver (nil otherwise).
	Owner *Owner
}

// remoteError converts an error frame's error.
func remoteError(we *WireError) *RemoteError {
	if we == nil {
		return &RemoteError{Code: CodeInternal, Message: "error frame without an error"}
	}
	return &RemoteError{Code: we.Code, Message: we.Message, Owner: we.Owner}
}

// Error returns the other side's message.
func (e *RemoteError) Error() string { return e.Message }

// Unwrap returns the sentinel error of the code, if any.
func (e *RemoteError) Unwrap() error {
	switch e.Code {
	case CodePathEscapes:
		return tool.ErrPathEscapes
	case CodeNotFound:
		return tool.ErrNotFound
	case CodeTooLarge:
		return localenv.ErrTooLarge
	case CodeFrameTooLarge:
		return ErrFrameTooLarge
	case CodeCanceled:
		return context.Canceled
	case CodeDeadline:
		return context.DeadlineExceeded
	case CodeBadFrame:
		return ErrMalformedFrame
	case CodeConflict:
		return tool.ErrConflict
	case CodeNotOwner:
		return ErrNotOwner
	}
	return nil
}

// toWire classifies err for an error frame.
func toWire(err error) *WireError {
	code := CodeFailed
	switch {
	case errors.Is(err, tool.ErrPathEscapes):
		code = CodePathEscapes
	case errors.Is(err, tool.ErrNotFound):
		code = CodeNotFound
	case errors.Is(err, localenv.ErrTooLarge):
		code = CodeTooLarge
	case errors.Is(err, ErrFrameTooLarge):
		code = CodeFrameTooLarge
	case errors.Is(err, context.Canceled):
		code = CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = CodeDeadline
	case errors.Is(err, ErrMalformedFrame):
		code = CodeBadFrame
	case errors.Is(err, tool.ErrConflict):
		code = CodeConflict
	case errors.Is(err, ErrNotOwner):
		return notOwnerWire(err)
	}
	return &WireError{Code: code, Message: err.Error()}
}

func wireErrorf(code, format string, args ...any) *WireError {
	return &WireError{Code: code, Message: fmt.Sprintf(format, args...)}
}
