package builtin

import (
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// The benchmarks run the worst inputs of issue 19 through the tools over a
// real local environment; they report numbers, not pass/fail.

func benchTool(b *testing.B, files map[string]string, reg tool.Registered, args map[string]any) {
	env, dir := newEnv(b)
	writeFiles(b, dir, files)
	c := call{env: env, files: tool.NewViews()}
	b.ReportAllocs()
	for b.Loop() {
		c.run(b, reg, args)
	}
}

func BenchmarkEditFileNearMiss(b *testing.B) {
	content, old := nearMiss()
	benchTool(b, map[string]string{"f.txt": content}, EditFile(Gemini),
		map[string]any{"file_path": "f.txt", "old_string": old, "new_string": "z"})
}

func BenchmarkEditFileReplaceAllBlowUp(b *testing.B) {
	benchTool(b, map[string]string{"f.txt": strings.Repeat("0123456789abcdef", 1<<16)}, EditFile(Gemini),
		map[string]any{"file_path": "f.txt", "old_string": "0123456789abcdef", "new_string": strings.Repeat("y", 1<<10), "replace_all": true})
}

func BenchmarkReadFileHugeLimit(b *testing.B) {
	benchTool(b, map[string]string{"f.txt": strings.Repeat("\n", 10<<20-1)}, ReadFile(Anthropic),
		map[string]any{"file_path": "f.txt", "limit": 1 << 30})
}

func BenchmarkReadManyFilesNestedDoubleStar(b *testing.B) {
	benchTool(b, map[string]string{strings.Repeat("a/", 30) + "c.txt": "x\n"}, ReadManyFiles(Gemini),
		map[string]any{"paths": []string{"**/*.txt"}, "exclude": []string{strings.Repeat("**/a/", 14) + "**/b"}})
}

func BenchmarkShellStream64MiB(b *testing.B) {
	benchTool(b, nil, Shell(OpenAI), map[string]any{"command": "head -c 67108864 /dev/zero | tr '\\0' a", "timeout_ms": 120000})
}
