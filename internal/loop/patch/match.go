package patch

import (
	"context"
	"fmt"
	"strings"
	"unicode"
)

// Fuzz is how loosely a hunk had to be matched against the file.
type Fuzz int

// Fuzz levels, from strictest to loosest.
const (
	// FuzzExact: lines matched byte for byte.
	FuzzExact Fuzz = iota
	// FuzzTrailingWhitespace: lines matched after removing trailing whitespace.
	FuzzTrailingWhitespace
	// FuzzWhitespace: lines matched ignoring leading, trailing and repeated
	// inner whitespace.
	FuzzWhitespace
	// FuzzUnicode: as FuzzWhitespace, with Unicode punctuation (smart quotes,
	// dashes, non-breaking and other special spaces) treated as ASCII.
	FuzzUnicode
)

var fuzzLevels = []Fuzz{FuzzExact, FuzzTrailingWhitespace, FuzzWhitespace, FuzzUnicode}

// String names the level for messages.
func (f Fuzz) String() string {
	switch f {
	case FuzzExact:
		return "exact"
	case FuzzTrailingWhitespace:
		return "ignoring trailing whitespace"
	case FuzzWhitespace:
		return "ignoring whitespace"
	case FuzzUnicode:
		return "ignoring whitespace and Unicode punctuation"
	default:
		return "unknown"
	}
}

// Normalize returns s as compared at level f.
func (f Fuzz) Normalize(s string) string {
	switch f {
	case FuzzTrailingWhitespace:
		return strings.TrimRightFunc(s, unicode.IsSpace)
	case FuzzWhitespace:
		return strings.Join(strings.Fields(s), " ")
	case FuzzUnicode:
		return strings.Join(strings.Fields(NormalizePunctuation(s)), " ")
	default:
		return s
	}
}

// NormalizePunctuation maps Unicode punctuation that models and editors
// substitute for ASCII (typographic quotes, dashes, minus, special spaces,
// ellipsis) to its ASCII equivalent.
func NormalizePunctuation(s string) string {
	if isASCII(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		b.WriteString(PunctuationEquivalent(r))
	}
	return b.String()
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// PunctuationEquivalent returns the ASCII equivalent of the Unicode
// punctuation or special space r, or r itself.
func PunctuationEquivalent(r rune) string {
	switch r {
	case '\u2010', '\u2011', '\u2012', '\u2013', '\u2014', '\u2015', '\u2212', '\uFE58', '\uFE63', '\uFF0D':
		return "-"
	case '\u2018', '\u2019', '\u201A', '\u201B', '\u2032', '\uFF07':
		return "'"
	case '\u201C', '\u201D', '\u201E', '\u201F', '\u2033', '\u00AB', '\u00BB', '\uFF02':
		return "\""
	case '\u00A0', '\u2002', '\u2003', '\u2004', '\u2005', '\u2006', '\u2007', '\u2008', '\u2009',
		'\u200A', '\u202F', '\u205F', '\u3000':
		return " "
	case '\u2026':
		return "..."
	default:
		return string(r)
	}
}

// lineIndex caches the lines of a file normalised at each fuzz level.
type lineIndex struct {
	lines []string
	norm  map[Fuzz][]string
}

func newLineIndex(lines []string) *lineIndex {
	return &lineIndex{lines: lines, norm: map[Fuzz][]string{FuzzExact: lines}}
}

func (x *lineIndex) at(f Fuzz) []string {
	if n, ok := x.norm[f]; ok {
		return n
	}
	n := make([]string, len(x.lines))
	for i, l := range x.lines {
		n[i] = f.Normalize(l)
	}
	x.norm[f] = n
	return n
}

func normalizeAll(lines []string, f Fuzz) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = f.Normalize(l)
	}
	return out
}

// LineMatcher finds a run of lines in a stream of lines, one line at a
// time, by Knuth-Morris-Pratt over line identities: the pattern's lines are
// interned once, a line that is none of them resets the search, and each
// line costs amortised O(1) comparisons however the pattern repeats.
type LineMatcher struct {
	ids       map[string]int
	pat, fail []int
	j         int // pattern lines matched so far
}

// NewLineMatcher returns a matcher of pattern (not empty).
func NewLineMatcher(pattern []string) *LineMatcher {
	m := len(pattern)
	lm := &LineMatcher{ids: make(map[string]int, m), pat: make([]int, m), fail: make([]int, m)}
	for i, l := range pattern {
		id, ok := lm.ids[l]
		if !ok {
			id = len(lm.ids)
			lm.ids[l] = id
		}
		lm.pat[i] = id
	}
	for i, k := 1, 0; i < m; i++ {
		for k > 0 && lm.pat[i] != lm.pat[k] {
			k = lm.fail[k-1]
		}
		if lm.pat[i] == lm.pat[k] {
			k++
		}
		lm.fail[i] = k
	}
	return lm
}

// Next feeds the next line and reports whether a match of the pattern ends
// with it. After a match the search goes on as if matches may overlap;
// Reset starts afresh instead.
func (lm *LineMatcher) Next(line string) bool {
	id, ok := lm.ids[line]
	if !ok {
		lm.j = 0
		return false
	}
	for lm.j > 0 && id != lm.pat[lm.j] {
		lm.j = lm.fail[lm.j-1]
	}
	if id == lm.pat[lm.j] {
		lm.j++
	}
	if lm.j < len(lm.pat) {
		return false
	}
	lm.j = lm.fail[lm.j-1]
	return true
}

// Reset forgets the lines fed so far.
func (lm *LineMatcher) Reset() { lm.j = 0 }

// ctxCheckEvery is how many lines the matchers scan between checks of the
// context.
const ctxCheckEvery = 4096

// FindLines returns the positions >= from in lines where pattern occurs as a
// run of consecutive equal lines, at most limit of them (limit < 1 means
// all). With overlap, a match may start inside the previous one; without,
// the search resumes after it. It runs in O(len(lines) + len(pattern)) line
// comparisons (Knuth-Morris-Pratt over line identities), so a near-miss
// pattern in a large file costs no more than a single scan, and it checks
// ctx while scanning.
func FindLines(ctx context.Context, lines, pattern []string, from, limit int, overlap bool) ([]int, error) {
	m := len(pattern)
	if m == 0 || from < 0 || from+m > len(lines) {
		return nil, nil
	}
	lm := NewLineMatcher(pattern)
	var hits []int
	for i := from; i < len(lines); i++ {
		if (i-from)%ctxCheckEvery == ctxCheckEvery-1 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("match lines: %w", err)
			}
		}
		if !lm.Next(lines[i]) {
			continue
		}
		hits = append(hits, i-m+1)
		if limit > 0 && len(hits) >= limit {
			return hits, nil
		}
		if !overlap {
			lm.Reset()
		}
	}
	return hits, nil
}

// find returns the positions >= from (or only the final position when
// atEOF) where pattern matches, at the strictest level with any match, and
// that level. Pattern must not be empty. At most limit positions are
// returned. The cost is linear in the file and the pattern per level.
func (x *lineIndex) find(ctx context.Context, pattern []string, from int, atEOF bool, limit int) ([]int, Fuzz, error) {
	n, m := len(x.lines), len(pattern)
	if m == 0 || m > n || from > n-m {
		return nil, FuzzExact, nil
	}
	for _, f := range fuzzLevels {
		if err := ctx.Err(); err != nil {
			return nil, FuzzExact, fmt.Errorf("match lines: %w", err)
		}
		lines := x.at(f)
		pat := normalizeAll(pattern, f)
		if atEOF {
			if equalAt(lines, n-m, pat) {
				return []int{n - m}, f, nil
			}
			continue
		}
		hits, err := FindLines(ctx, lines, pat, from, limit, true)
		if err != nil {
			return nil, FuzzExact, err
		}
		if len(hits) > 0 {
			return hits, f, nil
		}
	}
	return nil, FuzzExact, nil
}

func equalAt(lines []string, i int, pat []string) bool {
	for j, p := range pat {
		if lines[i+j] != p {
			return false
		}
	}
	return true
}

// findHint returns the first line >= from matching hint (at any fuzz level,
// then as a substring of a line ignoring whitespace), or -1.
func (x *lineIndex) findHint(ctx context.Context, hint string, from int) (int, Fuzz, error) {
	hits, f, err := x.find(ctx, []string{hint}, from, false, 1)
	if err != nil || len(hits) > 0 {
		if len(hits) > 0 {
			return hits[0], f, nil
		}
		return -1, FuzzExact, err
	}
	want := FuzzUnicode.Normalize(hint)
	if want == "" {
		return -1, FuzzExact, nil
	}
	lines := x.at(FuzzUnicode)
	for i := from; i < len(lines); i++ {
		if (i-from)%ctxCheckEvery == ctxCheckEvery-1 {
			if err := ctx.Err(); err != nil {
				return -1, FuzzExact, fmt.Errorf("match hint: %w", err)
			}
		}
		if strings.Contains(lines[i], want) {
			return i, FuzzUnicode, nil
		}
	}
	return -1, FuzzExact, nil
}
