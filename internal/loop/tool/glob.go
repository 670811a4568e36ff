package tool

import "path"

// MatchSegments reports whether the segments of a slash-separated relative
// name match the segments of a glob pattern: each pattern segment is a
// path.Match pattern, and "**" matches zero or more name segments.
// Environments and tools split and clean pattern and name as their own
// rules say, then share this matcher.
func MatchSegments(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for len(pat) > 1 && pat[1] == "**" {
				pat = pat[1:]
			}
			if len(pat) == 1 {
				return true
			}
			for i := 0; i <= len(name); i++ {
				if MatchSegments(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}
