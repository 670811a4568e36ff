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
	childPID := filepath.Join(dir, "child.pid")
	tests := []struct {
		name   string
		args   []string
		ran    string // a file the command creates, "" for none
		stderr string
	}{
		{name: "runs the command, in the core environment", args: []string{"--", "/bin/sh", "-c",
			`[ -z "$GIT_DIR" ] && [ -n "$PATH" ] && touch ` + done}, ran: done},
		{name: "a command that fails", args: []string{"--", "/bin/sh", "-c", "echo broken >&2; exit 3"}, stderr: "exit status 3"},
		{name: "no such command (an image without sh)", args: []string{"--", "/no/such/sh", "-c", "true"}, stderr: "/no/such/sh"},
		{name: "no command", args: []string{"--"}, stderr: "no command"},
		{name: "a bad flag", args: []string{"--bogus"}, stderr: "bogus"},
		{
			name: "a command past its timeout, and its background child",
			args: []string{"--timeout", "200ms", "--", "/bin/sh", "-c",
				"/bin/sh -c 'echo $$ > " + childPID + "; exec sleep 30' >/dev/null 2>&1 & while [ ! -s " + childPID + " ]; do :; done; exec sleep 30"},
			stderr: "killed", ran: childPID,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
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
		})
	}
	// The background child got the group's SIGKILL: it is gone, or a zombie
	// waiting for its new parent to reap it.
	b, err := os.ReadFile(childPID)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	for i := 0; ; i++ {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if i == 100 {
			t.Fatalf("the timed-out command's background child %s is still running: %s", pid, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
