package webfetch

import (
	"bytes"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// maxDepth bounds the element nesting the converter follows structurally;
// deeper content is kept as plain text (a page of a million nested divs
// must not exhaust the stack).
const maxDepth = 200

// HTMLToMarkdown converts an HTML document to Markdown-like text: the title
// as a top heading, headings, paragraphs, lists, links (resolved against
// base), images' alt text, preformatted blocks, inline code and tables.
// Scripts, styles, templates, SVG, forms' controls and other non-content
// elements are dropped. Broken or truncated HTML is converted as far as it
// parses.
func HTMLToMarkdown(doc string, base *url.URL) string {
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil { // e.g. nesting deeper than the parser follows
		return plainText(doc)
	}
	c := &converter{base: base}
	if b := findBase(root); b != "" && base != nil {
		if u, err := base.Parse(b); err == nil {
			c.base = u
		}
	}
	if t := findTitle(root); t != "" {
		c.write("# " + t)
		c.breakLines(2)
	}
	c.children(root, 0)
	return tidy(c.buf.String())
}

// converter writes Markdown into buf. Text is collapsed into words joined
// by single spaces; block elements ask for line breaks, which are written
// (with the current list indentation) only before the next text.
type converter struct {
	buf   bytes.Buffer
	base  *url.URL
	pre   int        // inside <pre>: text is written verbatim
	lists []listItem // open lists, innermost last

	pendingNL    int  // line breaks to write before the next text
	pendingSpace bool // a space to write before the next text
}

type listItem struct {
	ordered bool
	n       int
}

// state is what write depends on, saved to undo empty links.
type state struct {
	len          int
	pendingNL    int
	pendingSpace bool
}

func (c *converter) save() state { return state{c.buf.Len(), c.pendingNL, c.pendingSpace} }

func (c *converter) restore(s state) {
	c.buf.Truncate(s.len)
	c.pendingNL, c.pendingSpace = s.pendingNL, s.pendingSpace
}

func (c *converter) breakLines(n int) {
	if c.buf.Len() == 0 {
		return
	}
	c.pendingNL = max(c.pendingNL, n)
	c.pendingSpace = false
}

func (c *converter) indent() string {
	if len(c.lists) <= 1 {
		return ""
	}
	return strings.Repeat("  ", len(c.lists)-1)
}

// write writes s after any pending line breaks or space.
func (c *converter) write(s string) {
	if s == "" {
		return
	}
	if c.pendingNL > 0 && c.buf.Len() > 0 {
		c.buf.WriteString(strings.Repeat("\n", c.pendingNL))
		c.buf.WriteString(c.indent())
	} else if c.pendingSpace && c.buf.Len() > 0 {
		if b := c.buf.Bytes(); b[len(b)-1] != ' ' && b[len(b)-1] != '\n' {
			c.buf.WriteByte(' ')
		}
	}
	c.pendingNL, c.pendingSpace = 0, false
	c.buf.WriteString(s)
}

// tight writes s right after the previous text (closing markers).
func (c *converter) tight(s string) {
	sp := c.pendingSpace
	c.pendingSpace = false
	c.write(s)
	c.pendingSpace = sp
}

func (c *converter) text(s string) {
	if c.pre > 0 {
		// Verbatim: pending breaks, then the text as it is.
		if c.pendingNL > 0 && c.buf.Len() > 0 {
			c.buf.WriteString(strings.Repeat("\n", c.pendingNL))
		}
		c.pendingNL, c.pendingSpace = 0, false
		c.buf.WriteString(s)
		return
	}
	if s == "" {
		return
	}
	if isSpace(s[0]) {
		c.pendingSpace = true
	}
	for i, w := range strings.Fields(s) {
		if i > 0 {
			c.pendingSpace = true
		}
		c.write(w)
	}
	if isSpace(s[len(s)-1]) {
		c.pendingSpace = true
	}
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' }

func (c *converter) children(n *html.Node, depth int) {
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		c.node(ch, depth+1)
	}
}

// skipped elements never contribute text.
var skipped = map[atom.Atom]bool{
	atom.Head: true, atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Svg: true, atom.Math: true, atom.Canvas: true, atom.Iframe: true, atom.Object: true,
	atom.Embed: true, atom.Input: true, atom.Select: true, atom.Button: true, atom.Textarea: true,
	atom.Audio: true, atom.Video: true, atom.Picture: true, atom.Source: true, atom.Map: true,
}

// blocks are separated from what surrounds them by a blank line.
var blocks = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Section: true, atom.Article: true, atom.Header: true,
	atom.Footer: true, atom.Main: true, atom.Aside: true, atom.Nav: true, atom.Blockquote: true,
	atom.Figure: true, atom.Figcaption: true, atom.Form: true, atom.Fieldset: true, atom.Address: true,
	atom.Details: true, atom.Summary: true, atom.Dl: true, atom.Table: true, atom.Caption: true,
}

func (c *converter) node(n *html.Node, depth int) {
	switch n.Type {
	case html.TextNode:
		c.text(n.Data)
		return
	case html.ElementNode:
	default:
		c.children(n, depth)
		return
	}
	if skipped[n.DataAtom] {
		return
	}
	if depth > maxDepth {
		c.flat(n)
		return
	}
	switch a := n.DataAtom; {
	case headingLevel(a) > 0:
		c.breakLines(2)
		c.write(strings.Repeat("#", headingLevel(a)) + " ")
		c.children(n, depth)
		c.breakLines(2)
	case a == atom.Br:
		c.breakLines(1)
	case a == atom.Hr:
		c.breakLines(2)
		c.write("---")
		c.breakLines(2)
	case a == atom.Pre:
		c.breakLines(2)
		c.write("```")
		c.breakLines(1)
		c.pre++
		c.children(n, depth)
		c.pre--
		c.breakLines(1)
		c.write("```")
		c.breakLines(2)
	case a == atom.Code || a == atom.Kbd || a == atom.Samp:
		if c.pre > 0 {
			c.children(n, depth)
			return
		}
		s := c.save()
		c.write("`")
		after := c.buf.Len()
		c.children(n, depth)
		if c.buf.Len() == after {
			c.restore(s)
			return
		}
		c.tight("`")
	case a == atom.A:
		href := c.link(attr(n, "href"))
		if href == "" || c.pre > 0 {
			c.children(n, depth)
			return
		}
		s := c.save()
		c.write("[")
		after := c.buf.Len()
		c.children(n, depth)
		if c.buf.Len() == after {
			c.restore(s)
			return
		}
		c.tight("](" + href + ")")
	case a == atom.Img:
		if alt := strings.Join(strings.Fields(attr(n, "alt")), " "); alt != "" {
			c.write("![" + alt + "]")
		}
	case a == atom.Ul || a == atom.Ol:
		c.breakLines(1)
		if len(c.lists) == 0 {
			c.breakLines(2)
		}
		start := 1
		if v, err := strconv.Atoi(attr(n, "start")); err == nil {
			start = v
		}
		c.lists = append(c.lists, listItem{ordered: a == atom.Ol, n: start - 1})
		c.children(n, depth)
		c.lists = c.lists[:len(c.lists)-1]
		c.breakLines(1)
		if len(c.lists) == 0 {
			c.breakLines(2)
		}
	case a == atom.Li:
		c.breakLines(1)
		marker := "- "
		if l := len(c.lists); l > 0 && c.lists[l-1].ordered {
			c.lists[l-1].n++
			marker = strconv.Itoa(c.lists[l-1].n) + ". "
		}
		c.write(marker)
		c.children(n, depth)
		c.breakLines(1)
	case a == atom.Dt:
		c.breakLines(1)
		c.children(n, depth)
		c.breakLines(1)
	case a == atom.Dd:
		c.breakLines(1)
		c.write(": ")
		c.children(n, depth)
		c.breakLines(1)
	case a == atom.Tr:
		c.breakLines(1)
		c.write("|")
		cells := 0
		header := false
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			if ch.Type != html.ElementNode || (ch.DataAtom != atom.Td && ch.DataAtom != atom.Th) {
				continue
			}
			cells++
			header = header || ch.DataAtom == atom.Th
			c.pendingSpace = true
			c.inline(ch, depth+1)
			c.pendingSpace = true
			c.tight(" |")
		}
		if header && n.PrevSibling == nil {
			c.breakLines(1)
			c.write("|" + strings.Repeat(" --- |", cells))
		}
		c.breakLines(1)
	case blocks[a]:
		c.breakLines(2)
		c.children(n, depth)
		c.breakLines(2)
	default:
		c.children(n, depth)
	}
}

// inline converts a table cell's content on one line.
func (c *converter) inline(n *html.Node, depth int) {
	var sub converter
	sub.base = c.base
	sub.children(n, depth)
	c.text(strings.ReplaceAll(strings.Join(strings.Fields(sub.buf.String()), " "), "|", `\|`))
}

// flat writes the text of n's subtree without structure, iteratively.
func (c *converter) flat(n *html.Node) {
	stack := []*html.Node{n}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x.Type == html.TextNode {
			c.text(x.Data)
			continue
		}
		if x.Type == html.ElementNode && skipped[x.DataAtom] {
			continue
		}
		if x.Type == html.ElementNode && blocks[x.DataAtom] {
			c.pendingSpace = true
		}
		for ch := x.LastChild; ch != nil; ch = ch.PrevSibling {
			stack = append(stack, ch)
		}
	}
}

// link resolves href against the base; links that lead nowhere a reader
// can follow (javascript:, fragments of the page itself) return "".
func (c *converter) link(href string) string {
	href = strings.TrimSpace(href)
	if href == "" || strings.HasPrefix(href, "#") {
		return ""
	}
	u, err := url.Parse(href)
	if err != nil {
		return ""
	}
	if c.base != nil {
		u = c.base.ResolveReference(u)
	}
	switch u.Scheme {
	case "http", "https", "mailto", "ftp":
	default:
		return ""
	}
	return strings.NewReplacer(" ", "%20", "(", "%28", ")", "%29").Replace(u.String())
}

func headingLevel(a atom.Atom) int {
	switch a {
	case atom.H1:
		return 1
	case atom.H2:
		return 2
	case atom.H3:
		return 3
	case atom.H4:
		return 4
	case atom.H5:
		return 5
	case atom.H6:
		return 6
	}
	return 0
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val
		}
	}
	return ""
}

// find returns the first element of type a, searching iteratively.
func find(root *html.Node, a atom.Atom) *html.Node {
	stack := []*html.Node{root}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x.Type == html.ElementNode && x.DataAtom == a {
			return x
		}
		for ch := x.LastChild; ch != nil; ch = ch.PrevSibling {
			stack = append(stack, ch)
		}
	}
	return nil
}

func findTitle(root *html.Node) string {
	t := find(root, atom.Title)
	if t == nil || t.FirstChild == nil {
		return ""
	}
	return strings.Join(strings.Fields(t.FirstChild.Data), " ")
}

func findBase(root *html.Node) string {
	if b := find(root, atom.Base); b != nil {
		return attr(b, "href")
	}
	return ""
}

// plainText extracts the text of doc token by token, without structure,
// for documents the parser refuses.
func plainText(doc string) string {
	c := &converter{}
	z := html.NewTokenizer(strings.NewReader(doc))
	skip := 0
	for {
		switch z.Next() {
		case html.ErrorToken:
			return tidy(c.buf.String())
		case html.TextToken:
			if skip == 0 {
				c.text(string(z.Text()))
			}
		case html.StartTagToken:
			name, _ := z.TagName()
			if a := atom.Lookup(name); skipped[a] && a != atom.Head {
				skip++
			} else if blocks[a] {
				c.pendingSpace = true
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			if a := atom.Lookup(name); skipped[a] && a != atom.Head && skip > 0 {
				skip--
			}
		}
	}
}

var (
	trailingSpace = regexp.MustCompile(`(?m)[ \t]+$`)
	blankLines    = regexp.MustCompile(`\n{3,}`)
)

// tidy drops trailing spaces and runs of blank lines.
func tidy(s string) string {
	s = trailingSpace.ReplaceAllString(s, "")
	s = blankLines.ReplaceAllString(s, "\n\n")
	return strings.TrimSpace(s) + "\n"
}
