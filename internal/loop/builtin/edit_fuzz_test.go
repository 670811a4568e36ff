package builtin

import "testing"

// FuzzFindSpans checks that edit_file's matcher returns in-bounds, ordered,
// non-overlapping spans, exact ones equal to old_string.
func FuzzFindSpans(f *testing.F) {
	f.Add("if x {\n\treturn  1\n}\n", "return 1")
	f.Add("a = foo(\u201cx\u201d) + 1\n", "foo(\"x\")")
	f.Add("one\r\ntwo\r\n", "one\ntwo\n")
	f.Add("x\n\n  \n", " \n")
	f.Fuzz(func(t *testing.T, content, old string) {
		if old == "" {
			return
		}
		spans, level, err := findSpans(t.Context(), content, old)
		if err != nil {
			return // too many occurrences: reported to the model, not a span bug
		}
		prev := 0
		for _, s := range spans {
			if s[0] < prev || s[1] < s[0] || s[1] > len(content) {
				t.Fatalf("bad span %v after %d in %q (len %d)", s, prev, content, len(content))
			}
			if level == matchExact && content[s[0]:s[1]] != old {
				t.Fatalf("exact span %q != %q", content[s[0]:s[1]], old)
			}
			prev = s[1]
		}
	})
}
