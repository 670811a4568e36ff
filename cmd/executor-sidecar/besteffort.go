package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// bestEffort runs the command of args (after its flags and "--"), bounded
// by --timeout, and reports what went wrong on stderr but never fails: it
// is the workspace container's postStart hook (changes.PodStartCommand),
// and a failing hook kills its container. A command that does not end in
// time is killed with its whole process group. The command gets the core
// environment the executor gives commands by default, so the workspace's
// own variables (GIT_DIR, say) do not steer it.
func bestEffort(args []string, stderr io.Writer) {
	fs := flag.NewFlagSet("best-effort", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", time.Minute, "how long the command may run")
	if err := fs.Parse(args); err != nil {
		return
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "executor-sidecar best-effort: no command")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second // a background process still holding the output
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.Env = localenv.FilterEnv(os.Environ(), tool.EnvInheritCore, nil)
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(stderr, "executor-sidecar best-effort: %s: %v\n", argv[0], err)
	}
}
