package builtin

import (
	"context"
	"errors"
	"fmt"

	"github.com/agent-operator/agent-operator/internal/loop/patch"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

const applyPatchDescription = `Use the apply_patch tool to edit files.
Your patch language is a stripped-down, file-oriented diff format designed to be easy to parse and safe to apply. You can think of it as a high-level envelope:

*** Begin Patch
[ one or more file sections ]
*** End Patch

Within that envelope, you get a sequence of file operations.
You MUST include a header to specify the action you are taking.
Each operation starts with one of three headers:

*** Add File: <path> - create a new file. Every following line is a + line (the initial contents).
*** Delete File: <path> - remove an existing file. Nothing follows.
*** Update File: <path> - patch an existing file in place (optionally with a rename).

May be immediately followed by *** Move to: <new path> if you want to rename the file.
Then one or more "hunks", each introduced by @@ (optionally followed by a hunk header, such as the class or function the change is in).
Within a hunk each line starts with:
' ' (space) for a context line that stays unchanged,
'-' for a line to remove,
'+' for a line to add.

For context: show 3 lines of code immediately above and 3 lines immediately below each change. If a change is within 3 lines of a previous change, do NOT duplicate the first change's lines in the second change's context.
If 3 lines of context is insufficient to uniquely identify the snippet, use the @@ header to name the class or function, e.g.:
@@ class BaseClass
@@ 	def method():
Hunks must appear in file order. Use *** End of File after a hunk that ends at the end of the file.

Example:

*** Begin Patch
*** Add File: hello.txt
+Hello world
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-print("Hi")
+print("Hello, world!")
*** Delete File: obsolete.txt
*** End Patch

Remember:
- You must include a header with your intended action (Add/Delete/Update)
- You must prefix new lines with + even when creating a new file
- File references can only be relative, NEVER ABSOLUTE.
- The patch is applied atomically: if any part fails, no file is changed.
- *** Add File fails if the file already exists, and *** Move to fails if the destination exists: update or delete it instead.
- If a file you read changed since (a command, another agent or the user wrote it), the patch is refused with a StaleFile error: read the file again and rebuild the patch.`

// ApplyPatch returns the apply_patch tool (v4a format, seed 000 Appendix A),
// applied atomically over the environment. The output lists the affected
// files and operations ("A path", "M path", "D path") and notes fuzzy
// matches.
func ApplyPatch(v Variant) tool.Registered {
	schema := objectSchema([]string{"patch"},
		p("patch", "string", "The entire contents of the apply_patch command, from \"*** Begin Patch\" to \"*** End Patch\"."),
	)
	return tool.Registered{
		Definition: tool.Definition{Name: "apply_patch", Description: applyPatchDescription, Parameters: schema},
		Executor:   func(ctx context.Context, inv *tool.Invocation) (tool.Result, error) { return applyPatch(ctx, inv, v) },
	}
}

type patchArgs struct {
	Patch string `json:"patch"`
	Input string `json:"input"` // codex's freeform name, accepted as an alias
}

func applyPatch(ctx context.Context, inv *tool.Invocation, v Variant) (tool.Result, error) {
	if len(inv.Arguments) > MaxPatchBytes+64<<10 {
		return errorResult("Error: the patch is %d bytes; apply_patch accepts at most %d bytes. Split it into several smaller patches.", len(inv.Arguments), MaxPatchBytes)
	}
	var a patchArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	text := a.Patch
	if text == "" {
		text = a.Input
	}
	if text == "" {
		return errorResult("Error: the \"patch\" parameter is required and must contain a patch from \"*** Begin Patch\" to \"*** End Patch\".")
	}
	if len(text) > MaxPatchBytes {
		return errorResult("Error: the patch is %d bytes; apply_patch accepts at most %d bytes. Split it into several smaller patches.", len(text), MaxPatchBytes)
	}
	parsed, err := patch.Parse(text)
	if err != nil {
		return errorResult("%v\nNo files were changed. Fix the patch and try again.", err)
	}
	var paths []string
	for _, op := range parsed.Ops {
		paths = append(paths, op.Path)
		if op.MoveTo != "" {
			paths = append(paths, op.MoveTo)
		}
	}
	unlock, err := lockPaths(ctx, inv, paths...)
	if err != nil {
		return tool.Result{}, err
	}
	defer unlock()
	store := &envStore{env: inv.Env, inv: inv, variant: v, expect: map[string]string{}}
	res, err := patch.Apply(ctx, store, parsed)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return tool.Result{}, cerr
		}
		var stale *StaleFileError
		if errors.As(err, &stale) || isConflict(err) {
			return errorResult("%v\nNo files were changed.", err)
		}
		if errors.Is(err, tool.ErrPathEscapes) {
			return errorResult("%v\nNo files were changed. Paths must be inside the workspace %s.", err, inv.Env.WorkingDirectory())
		}
		return errorResult("%v\nNo files were changed. Read the file(s) again and fix the patch.", err)
	}
	for p, content := range store.written {
		if content == nil {
			forget(inv, p)
		} else {
			record(inv, p, content)
		}
	}
	return tool.Result{Output: res.Summary()}, nil
}

// envStore adapts a tool.ExecutionEnvironment to patch.Store. Reads check
// the model's view of the file (StaleFile); writes are conditional on the
// content this patch last read or wrote at that path, so a concurrent
// change fails the patch instead of being overwritten.
type envStore struct {
	env     tool.ExecutionEnvironment
	inv     *tool.Invocation
	variant Variant
	expect  map[string]string // path -> SHA-256 the file has now as far as this patch knows ("" = absent)
	written map[string][]byte // final content per path (nil = deleted)
}

func (s *envStore) Read(ctx context.Context, path string) ([]byte, error) {
	fc, err := s.env.ReadFile(ctx, path, tool.ReadOptions{})
	if err != nil {
		return nil, err
	}
	if fc.Binary {
		return nil, fmt.Errorf("%s is a binary file; apply_patch edits text files only", path)
	}
	if err := checkFresh(s.inv, s.variant, path, fc.Content); err != nil {
		return nil, err
	}
	s.expect[path] = sha256Hex(fc.Content)
	return fc.Content, nil
}

func (s *envStore) Write(ctx context.Context, path string, data []byte) error {
	want, known := s.expect[path]
	var err error
	if known {
		err = tool.WriteFileIf(ctx, s.env, path, data, want)
	} else {
		// Not read by this patch: an Add File (or a move destination), which
		// must not exist.
		err = tool.WriteFileIf(ctx, s.env, path, data, "")
	}
	if err != nil {
		if isConflict(err) {
			return &StaleFileError{File: path, Reason: "the file was changed by someone else while the patch was being applied"}
		}
		return err
	}
	s.expect[path] = sha256Hex(data)
	s.remember(path, data)
	return nil
}

func (s *envStore) Delete(ctx context.Context, path string) error {
	if err := s.env.DeleteFile(ctx, path); err != nil {
		return err
	}
	s.expect[path] = ""
	s.remember(path, nil)
	return nil
}

func (s *envStore) Exists(ctx context.Context, path string) (bool, error) {
	return s.env.FileExists(ctx, path)
}

func (s *envStore) remember(path string, data []byte) {
	if s.written == nil {
		s.written = map[string][]byte{}
	}
	s.written[path] = data
}
