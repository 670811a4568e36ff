package webfetch

import (
	"net/url"
	"strings"
	"testing"
)

func TestHTMLToMarkdown(t *testing.T) {
	base, _ := url.Parse("https://example.com/docs/page")
	tests := []struct {
		name, in, want string
	}{
		{"title and headings", `<title> My  Page </title><h1>Top</h1><h3>Sub</h3><p>text</p>`, "# My Page\n\n# Top\n\n### Sub\n\ntext\n"},
		{"script style and friends dropped", `<p>keep</p><script>var x = "drop";</script><style>p{}</style><template>t</template><svg><text>s</text></svg><noscript>n</noscript><iframe>i</iframe>`, "keep\n"},
		{"whitespace collapsed", "<p>a\n\t  b</p>\n\n\n<p>c</p>", "a b\n\nc\n"},
		{"links resolved", `<p><a href="../other">rel</a> <a href="https://x.org/a b">abs</a> <a href="#top">frag</a> <a href="javascript:go()">js</a> <a href="/x"><img src="i.png"></a></p>`,
			"[rel](https://example.com/other) [abs](https://x.org/a%20b) frag js\n"},
		{"base element", `<head><base href="https://cdn.example.org/v2/"></head><a href="x">x</a>`, "[x](https://cdn.example.org/v2/x)\n"},
		{"nested lists", `<ul><li>a<ul><li>b</li></ul></li><li>c</li></ul><ol start="3"><li>x</li><li>y</li></ol>`, "- a\n  - b\n- c\n\n3. x\n4. y\n"},
		{"pre kept verbatim", "<p>run:</p><pre><code>make  build\n  ./bin/x</code></pre><p>done</p>", "run:\n\n```\nmake  build\n  ./bin/x\n```\n\ndone\n"},
		{"inline code", `<p>call <code>f()</code> now</p>`, "call `f()` now\n"},
		{"table", `<table><tr><th>k</th><th>v</th></tr><tr><td>a|b</td><td><b>1</b></td></tr></table>`, "| k | v |\n| --- | --- |\n| a\\|b | 1 |\n"},
		{"images and breaks", `<p>x<br>y <img alt="a chart"> <hr> z</p>`, "x\ny ![a chart]\n\n---\n\nz\n"},
		{"truncated html", `<p>begin <a href="/a">unfinished`, "begin [unfinished](https://example.com/a)\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := HTMLToMarkdown(tc.in, base); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// Deep nesting is converted without recursing through all of it.
func TestHTMLToMarkdownDeepNesting(t *testing.T) {
	const depth = 100_000
	doc := strings.Repeat("<div>", depth) + "deep text" + strings.Repeat("</div>", depth)
	if got := HTMLToMarkdown(doc, nil); got != "deep text\n" {
		t.Errorf("got %q", got[:min(len(got), 200)])
	}
	doc = "<p>a</p>" + strings.Repeat("<div>", depth) + "<script>drop()</script>b"
	if got := HTMLToMarkdown(doc, nil); got != "a b\n" {
		t.Errorf("got %q", got[:min(len(got), 200)])
	}
}
