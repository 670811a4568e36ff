package builtin

import (
	"path/filepath"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// editCall is the native edit of v changing "hello" to "bye" in f.txt.
func editCall(v Variant) (tool.Registered, map[string]any) {
	if v == OpenAI {
		return ApplyPatch(v), map[string]any{"patch": "*** Begin Patch\n*** Update File: f.txt\n@@\n-hello\n+bye\n*** End Patch"}
	}
	return EditFile(v), map[string]any{"file_path": "f.txt", "old_string": "hello", "new_string": "bye"}
}

func TestStaleFileAfterOutsideChange(t *testing.T) {
	for _, v := range []Variant{OpenAI, Anthropic, Gemini} {
		t.Run(string(v), func(t *testing.T) {
			env, dir := newEnv(t)
			writeFiles(t, dir, map[string]string{"f.txt": "hello\n"})
			c := call{env: env, files: newViews()}
			reg, args := editCall(v)

			res, _ := c.run(t, ReadFile(v), map[string]any{"file_path": "f.txt"})
			expect(t, res, false, "hello")
			// A command changes the file behind the model's back.
			res, _ = c.run(t, Shell(v), map[string]any{"command": "echo more >> f.txt"})
			expect(t, res, false)
			res, _ = c.run(t, reg, args)
			expect(t, res, true, "StaleFile", "f.txt", "changed since it was last read", "read_file")
			if got := readBack(t, dir, "f.txt"); got != "hello\nmore\n" {
				t.Fatalf("the refused edit changed the file: %q", got)
			}
			// Read again: the edit goes through.
			res, _ = c.run(t, ReadFile(v), map[string]any{"file_path": "f.txt"})
			expect(t, res, false, "more")
			res, _ = c.run(t, reg, args)
			expect(t, res, false)
			if got := readBack(t, dir, "f.txt"); got != "bye\nmore\n" {
				t.Fatalf("f.txt = %q after the edit", got)
			}
			// The model's own edit keeps its view current: a second edit
			// needs no new read.
			res, _ = c.run(t, EditFile(Anthropic), map[string]any{"file_path": "f.txt", "old_string": "more", "new_string": "less"})
			expect(t, res, false)
		})
	}
}

func TestEditOfNeverReadFilePerProfile(t *testing.T) {
	tests := []struct {
		v       Variant
		refused bool
	}{
		{OpenAI, false},   // codex: apply_patch needs no prior read
		{Anthropic, true}, // Claude Code: edit_file refuses an unread file
		{Gemini, false},   // gemini-cli: no read required
	}
	for _, tc := range tests {
		t.Run(string(tc.v), func(t *testing.T) {
			env, dir := newEnv(t)
			writeFiles(t, dir, map[string]string{"f.txt": "hello\n"})
			reg, args := editCall(tc.v)
			res, _ := call{env: env, files: newViews()}.run(t, reg, args)
			if tc.refused {
				expect(t, res, true, "StaleFile", "was not read before editing")
				if readBack(t, dir, "f.txt") != "hello\n" {
					t.Error("the refused edit changed the file")
				}
				return
			}
			expect(t, res, false)
			if readBack(t, dir, "f.txt") != "bye\n" {
				t.Error("the edit did not land")
			}
		})
	}
}

func TestWriteFileOverUnreadFile(t *testing.T) {
	tests := []struct {
		v       Variant
		read    bool
		refused bool
	}{
		{Anthropic, false, true},
		{Anthropic, true, false},
		{OpenAI, false, false},
		{Gemini, false, false},
	}
	for _, tc := range tests {
		t.Run(string(tc.v), func(t *testing.T) {
			env, dir := newEnv(t)
			writeFiles(t, dir, map[string]string{"f.txt": "old\n"})
			c := call{env: env, files: newViews()}
			if tc.read {
				res, _ := c.run(t, ReadFile(tc.v), map[string]any{"file_path": "f.txt"})
				expect(t, res, false)
			}
			res, _ := c.run(t, WriteFile(tc.v), map[string]any{"file_path": "f.txt", "content": "new\n"})
			if tc.refused {
				expect(t, res, true, "StaleFile")
				return
			}
			expect(t, res, false, "Overwrote")
			// A new file never needs a read.
			res, _ = c.run(t, WriteFile(tc.v), map[string]any{"file_path": "g.txt", "content": "g\n"})
			expect(t, res, false, "Created")
		})
	}
}

func TestApplyPatchRecordsViewsOfWrittenFiles(t *testing.T) {
	env, dir := newEnv(t)
	writeFiles(t, dir, map[string]string{"a.txt": "a\n", "gone.txt": "x\n"})
	views := newViews()
	c := call{env: env, files: views}
	res, _ := c.run(t, ApplyPatch(OpenAI), map[string]any{"patch": "*** Begin Patch\n*** Add File: n.txt\n+n\n" +
		"*** Update File: a.txt\n*** Move to: b.txt\n@@\n-a\n+b\n*** Delete File: gone.txt\n*** End Patch"})
	expect(t, res, false)
	for _, tc := range []struct {
		file string
		seen bool
	}{{"n.txt", true}, {"b.txt", true}, {"a.txt", false}, {"gone.txt", false}} {
		_, ok := views.Seen(filepath.Join(dir, tc.file))
		if ok != tc.seen {
			t.Errorf("view of %s recorded = %v, want %v", tc.file, ok, tc.seen)
		}
	}
	// The model just wrote b.txt: editing it needs no read.
	res, _ = c.run(t, EditFile(Anthropic), map[string]any{"file_path": "b.txt", "old_string": "b", "new_string": "c"})
	expect(t, res, false)
}

func TestReadManyFilesRecordsViews(t *testing.T) {
	env, dir := newEnv(t)
	writeFiles(t, dir, map[string]string{"a.txt": "hello\n"})
	c := call{env: env, files: newViews()}
	res, _ := c.run(t, ReadManyFiles(Gemini), map[string]any{"paths": []string{"a.txt"}})
	expect(t, res, false, "hello")
	writeFiles(t, dir, map[string]string{"a.txt": "hello\nchanged\n"})
	res, _ = c.run(t, EditFile(Gemini), map[string]any{"file_path": "a.txt", "old_string": "hello", "new_string": "bye"})
	expect(t, res, true, "StaleFile")
}
