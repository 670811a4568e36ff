package localenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/proctest"
)

// TestRunningCommandsHoldNoThreads runs many commands at once and counts the process's OS
// threads while they run. The executor sidecar shares the pod's process limit with its
// commands, so threads that grow with them are taken from the workload and, while a fork bomb
// holds the limit, refused (which ends a Go process). exec.Cmd.Wait alone blocks one thread per
// running command.
func TestRunningCommandsHoldNoThreads(t *testing.T) {
	e, dir := newEnv(t)
	const n = 24
	before, err := proctest.Threads()
	if err != nil {
		t.Skip(err)
	}
	var wg sync.WaitGroup
	results := make([]*tool.ExecResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			// Each says it started, then runs until the test releases it.
			cmd := fmt.Sprintf("touch started.%d; while [ ! -e release ]; do sleep 0.05; done; echo done", i)
			results[i], errs[i] = e.ExecCommand(context.Background(), cmd, tool.ExecOptions{Timeout: time.Minute})
		})
	}
	release := func() { // writing it twice is harmless
		if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
			t.Error(err)
		}
	}
	defer wg.Wait()
	defer release() // a failure below still ends the commands
	for i := range n {
		for !exists(filepath.Join(dir, fmt.Sprintf("started.%d", i))) {
			time.Sleep(10 * time.Millisecond) // polling the commands' progress
		}
	}
	during, err := proctest.Threads()
	if err != nil {
		t.Fatal(err)
	}
	release()
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i].ExitCode != 0 || results[i].Stdout != "done\n" {
			t.Fatalf("command %d: err %v, result %+v", i, errs[i], results[i])
		}
	}
	if grew := during - before; grew >= n/2 {
		t.Fatalf("%d running commands added %d threads (%d before, %d during): each holds one", n, grew, before, during)
	}
}

// TestAwaitExitWithoutAPidfdReturns is the fallback where no pidfd can be had (a kernel older
// than 5.10, a seccomp profile without pidfd_open, a process already gone): awaitExit must
// return at once, so the caller's Wait decides, instead of waiting for ever.
func TestAwaitExitWithoutAPidfdReturns(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	// Reaped by Run: pidfd_open fails with ESRCH (unless the pid was reused at once, which
	// would make this wait for that process; the test then times out).
	awaitExit(cmd.Process.Pid)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
