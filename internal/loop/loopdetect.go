package loop

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
)

// detectLoop reports whether the last window tool calls repeat a pattern of
// length 1, 2 or 3 (seed 000 §2.10).
func detectLoop(history []Turn, window int) bool {
	recent := recentSignatures(history, window)
	if len(recent) < window || window <= 0 {
		return false
	}
	for _, n := range []int{1, 2, 3} {
		// A pattern must repeat at least twice: with window <= n the spec's
		// pseudocode would match any calls (see docs/spec-deviations.md).
		if window%n != 0 || n >= window {
			continue
		}
		pattern := recent[:n]
		match := true
		for i := n; i < window; i += n {
			if !slices.Equal(recent[i:i+n], pattern) {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// recentSignatures returns the signatures (name + arguments hash) of the
// last n tool calls in history, oldest first.
func recentSignatures(history []Turn, n int) []string {
	var sigs []string
	for i := len(history) - 1; i >= 0 && len(sigs) < n; i-- {
		a, ok := history[i].(*AssistantTurn)
		if !ok {
			continue
		}
		for j := len(a.ToolCalls) - 1; j >= 0 && len(sigs) < n; j-- {
			sum := sha256.Sum256(a.ToolCalls[j].Arguments)
			sigs = append(sigs, a.ToolCalls[j].Name+":"+hex.EncodeToString(sum[:8]))
		}
	}
	slices.Reverse(sigs)
	return sigs
}
