package tool

import "path"

// MatchSegments reports whether the segments of a slash-separated relative
// name match the segments of a glob pattern: each pattern segment is a
// path.Match pattern, and "**" matches zero or more name segments.
// Environments and tools split and clean pattern and name as their own
// rules say, then share this matcher.
//
// It simulates the pattern as a nondeterministic automaton over segments
// (the set of pattern positions reachable after each name segment), so the
// cost is at most len(pat)*len(name) segment matches however many "**" the
// pattern holds: no backtracking.
func MatchSegments(pat, name []string) bool {
	p := len(pat)
	active := make([]bool, p+1)
	next := make([]bool, p+1)
	// closure adds the positions reachable without consuming a segment:
	// a "**" may match zero segments.
	closure := func(set []bool) {
		for k := 0; k < p; k++ {
			if set[k] && pat[k] == "**" {
				set[k+1] = true
			}
		}
	}
	active[0] = true
	closure(active)
	for _, seg := range name {
		clear(next)
		moved := false
		for k := 0; k < p; k++ {
			if !active[k] {
				continue
			}
			if pat[k] == "**" {
				next[k] = true
				moved = true
				continue
			}
			if ok, _ := path.Match(pat[k], seg); ok {
				next[k+1] = true
				moved = true
			}
		}
		if !moved {
			return false
		}
		closure(next)
		active, next = next, active
	}
	return active[p]
}
