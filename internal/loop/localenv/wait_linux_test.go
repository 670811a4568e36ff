package localenv

import (
	"context"
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
	e, _ := newEnv(t)
	const n = 24
	before, err := proctest.Threads()
	if err != nil {
		t.Skip(err)
	}
	var wg sync.WaitGroup
	results := make([]*tool.ExecResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.ExecCommand(context.Background(), "sleep 2; echo done", tool.ExecOptions{Timeout: time.Minute})
		}()
	}
	time.Sleep(time.Second) // every command has started and is sleeping
	during, err := proctest.Threads()
	if err != nil {
		t.Fatal(err)
	}
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
