package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBestEffortNeverFails: the postStart hook's runner exits 0 whatever its
// command does (a failing hook kills the workspace container), runs it when
// it can, and kills one that outlives the timeout with its children.
func TestBestEffortNeverFails(t *testing.T) {
	dir := t.TempDir()
	done := filepath.Join(dir, "done")
	late := filepath.Join(dir, "late")
	tests := []struct {
		name    string
		args    []string
		ran     string // a file the command creates, "" for none
		stderr  string
		maxTime time.Duration
	}{
		{name: "runs the command, in the core environment", args: []string{"--", "/bin/sh", "-c",
			`[ -z "$GIT_DIR" ] && [ -n "$PATH" ] && touch ` + done}, ran: done},
		{name: "a command that fails", args: []string{"--", "/bin/sh", "-c", "echo broken >&2; exit 3"}, stderr: "exit status 3"},
		{name: "no such command (an image without sh)", args: []string{"--", "/no/such/sh", "-c", "true"}, stderr: "/no/such/sh"},
		{name: "no command", args: []string{"--"}, stderr: "no command"},
		{name: "a bad flag", args: []string{"--bogus"}, stderr: "bogus"},
		{
			name: "a command past its timeout, and its background child",
			args: []string{"--timeout", "200ms", "--", "/bin/sh", "-c", "(sleep 1; touch " + late + ") & sleep 30"},
			// Well below the command's own 30 s: it was killed.
			stderr: "killed", maxTime: 20 * time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			cmd := exec.Command(binary, append([]string{"best-effort"}, tc.args...)...)
			cmd.Env = append(os.Environ(), "GIT_DIR=/the/workspace/env/says/so")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("best-effort: %v (%s), want exit 0", err, out)
			}
			if tc.ran != "" {
				if _, err := os.Stat(tc.ran); err != nil {
					t.Errorf("the command did not run: %v", err)
				}
			}
			if !strings.Contains(string(out), tc.stderr) {
				t.Errorf("output %q, want it to mention %q", out, tc.stderr)
			}
			if tc.maxTime > 0 && time.Since(start) > tc.maxTime {
				t.Errorf("took %s, want the timeout to end it", time.Since(start))
			}
		})
	}
	time.Sleep(2 * time.Second) // past the background child's sleep
	if _, err := os.Stat(late); err == nil {
		t.Error("the timed-out command's background child survived it")
	}
}
