package profile

import (
	"maps"
	"testing"
)

// TestParseSnapshot: each command's output counts only when the command ran
// to its exit code and exited 0; a snapshot cut by the budget keeps the
// commands that finished.
func TestParseSnapshot(t *testing.T) {
	top, branch, status, log := snapshotCommands[0], snapshotCommands[1], snapshotCommands[2], snapshotCommands[3]
	cases := []struct {
		name   string
		stdout string
		want   map[string]string
	}{
		{"all four", "/w\n\x000\x00main\n\x000\x00?? a\n M b\n\x000\x00abc first\n\x000\x00",
			map[string]string{top: "/w", branch: "main", status: "?? a\n M b", log: "abc first"}},
		{"not a repository", "\x00128\x00", map[string]string{}},
		{"no commits yet", "/w\n\x000\x00HEAD\n\x00128\x00\x000\x00\x00128\x00",
			map[string]string{top: "/w", status: ""}},
		{"cut inside the status", "/w\n\x000\x00main\n\x000\x00?? a\n", map[string]string{top: "/w", branch: "main"}},
		{"cut inside an exit code", "/w\n\x000\x00main\n\x000", map[string]string{top: "/w"}},
		{"nothing", "", map[string]string{}},
		// A workspace's own git (or a hostile one) printing NULs and escape
		// bytes: fields past the four commands are ignored, nothing panics.
		{"forged frames", "/w\x000\x00\x1b[2Jmain\x000\x00\x000\x00x\x000\x00extra\x000\x00",
			map[string]string{top: "/w", branch: "\x1b[2Jmain", status: "", log: "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseSnapshot(tc.stdout); !maps.Equal(got, tc.want) {
				t.Errorf("parseSnapshot = %q, want %q", got, tc.want)
			}
		})
	}
}
