package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// pidsStartEnv makes the test binary the child of TestCommandStartsOnceTheProcessLimitFrees.
const pidsStartEnv = "EXECUTOR_TEST_PIDS_START"

// TestCommandStartsOnceTheProcessLimitFrees uses a pids cgroup's limit up, as the processes of
// a fork bomb the executor has just killed do until they are reaped, and starts a command:
// the kernel refuses its shell (EAGAIN) until the limit frees, and the command must run then,
// within its time limit, instead of failing at once; a command whose time runs out first fails
// and says why, and one stopped meanwhile ends at once, whatever its timeout. A stdio process
// (an MCP server) is started the same way. A workspace whose bomb was killed by the
// last call failed its next command this way on a loaded CI machine. Root and a writable pids
// hierarchy are needed, as for TestReservedThreadsOutliveAFullPidsLimit.
func TestCommandStartsOnceTheProcessLimitFrees(t *testing.T) {
	if os.Getenv(pidsStartEnv) != "" {
		pidsStartChild()
		return
	}
	parent := pidsHierarchy(t)
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep to use the limit up with")
	}
	out, err := runInPidsCgroup(t, parent, "TestCommandStartsOnceTheProcessLimitFrees", 64, pidsStartEnv)
	if err != nil || !strings.Contains(out, "ran once the limit freed: survived (exit 0); process survived") {
		t.Fatalf("the command did not run once the process limit freed (%v); output:\n%s", err, out)
	}
}

// pidsStartChild is the process in the cgroup: it fills the limit with sleeping processes until
// the kernel refuses one, starts a command, frees the limit 300 ms later and reports the result.
func pidsStartChild() {
	fail := func(format string, args ...any) {
		fmt.Printf(format+"\n", args...)
		os.Exit(1)
	}
	if _, err := os.Stdin.Read(make([]byte, 1)); err != nil {
		fail("wait for the cgroup: %v", err)
	}
	ReserveThreads(DefaultReservedThreads) // as the sidecar does: the runtime must not need a thread now
	env, err := localenv.New(os.TempDir())
	if err != nil {
		fail("env: %v", err)
	}

	var fillers []*exec.Cmd
	free := func() {
		for _, f := range fillers {
			_ = f.Process.Kill()
			_ = f.Wait()
		}
		fillers = nil
	}
	defer free()
	for {
		f := exec.Command("sleep", "600")
		err := f.Start()
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil {
			fail("start a filler: %v", err)
		}
		if len(fillers) > 100 {
			fail("the limit was never reached")
		}
		fillers = append(fillers, f)
	}

	// A limit that stays used up (a bomb that escaped its group) ends the call at its own time.
	if _, err := env.ExecCommand(context.Background(), "echo never", tool.ExecOptions{Timeout: 200 * time.Millisecond}); err == nil ||
		!strings.Contains(err.Error(), "process limit stayed used up") {
		fail("a command whose time ran out while the limit was used up: %v", err)
	}

	// A stop (the input's end) while the limit stays used up ends the call at
	// once, not at its timeout of an hour.
	stop, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, err := env.ExecCommand(stop, "echo never", tool.ExecOptions{Timeout: time.Hour}); !errors.Is(err, context.Canceled) {
		fail("a command stopped while the limit was used up: %v, want context.Canceled", err)
	}

	// A stdio process (an MCP server) is started the same way, bounded by its ctx's deadline.
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	if _, err := env.StartProcess(short, []string{"true"}, localenv.ProcessOptions{}); err == nil ||
		!strings.Contains(err.Error(), "process limit stayed used up") {
		fail("a process whose start time ran out while the limit was used up: %v", err)
	}

	type result struct {
		res *tool.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := env.ExecCommand(context.Background(), "echo survived", tool.ExecOptions{Timeout: 30 * time.Second})
		done <- result{res, err}
	}()
	type started struct {
		p   *localenv.Process
		err error
	}
	startedCh := make(chan started, 1)
	go func() {
		p, err := env.StartProcess(context.Background(), []string{"echo", "process survived"}, localenv.ProcessOptions{})
		startedCh <- started{p, err}
	}()
	select {
	case r := <-done:
		fail("the command ended while the limit was used up: %v, %+v", r.err, r.res)
	case s := <-startedCh:
		fail("the process start ended while the limit was used up: %v", s.err)
	case <-time.After(300 * time.Millisecond):
	}
	free()
	r := <-done
	if r.err != nil {
		fail("the command failed after the limit freed: %v", r.err)
	}
	s := <-startedCh
	if s.err != nil {
		fail("the process failed to start after the limit freed: %v", s.err)
	}
	out, err := io.ReadAll(s.p)
	s.p.Close()
	if err != nil && !errors.Is(err, os.ErrClosed) {
		fail("read the process's output: %v", err)
	}
	fmt.Printf("ran once the limit freed: %s (exit %d); %s\n", strings.TrimSpace(r.res.Stdout), r.res.ExitCode, strings.TrimSpace(string(out)))
}
