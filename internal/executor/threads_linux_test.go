package executor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pidsChildEnv makes the test binary the child of TestReservedThreadsOutliveAFullPidsLimit;
// its value is the child's pids cgroup directory.
const pidsChildEnv = "EXECUTOR_TEST_PIDS_CGROUP"

// blockers is how many goroutines the child blocks in a system call while its pids limit is
// used up, as a command's wait and the stream's read and write do in the executor.
const blockers = 12

// TestReservedThreadsOutliveAFullPidsLimit runs a process in a pids cgroup of its own, as the
// executor sidecar runs in the pod's, starts a fork bomb there and, once the bomb has used the
// limit up, blocks goroutines in system calls. Without reserved threads the Go runtime asks
// the kernel for threads, is refused, and ends the process (exit code 2, as the sidecar died
// in a workspace pod); with them the process lives on. It needs root and a writable pids
// cgroup hierarchy (CI's machine has both); elsewhere it is skipped.
func TestReservedThreadsOutliveAFullPidsLimit(t *testing.T) {
	if dir := os.Getenv(pidsChildEnv); dir != "" {
		pidsChild(dir)
		return
	}
	parent := pidsHierarchy(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash for the fork bomb")
	}
	for _, tc := range []struct {
		reserve int
		lives   bool
	}{
		{reserve: 0, lives: false}, // shows the case would catch a missing reserve
		{reserve: 2 * blockers, lives: true},
	} {
		t.Run(fmt.Sprintf("reserve=%d", tc.reserve), func(t *testing.T) {
			// Room for the child's own threads and its reserve, then a little for the bomb.
			out, err := runInPidsCgroup(t, parent, "TestReservedThreadsOutliveAFullPidsLimit", 2*blockers+32,
				pidsChildEnv, "EXECUTOR_TEST_RESERVE="+strconv.Itoa(tc.reserve))
			lived := err == nil && strings.Contains(out, "lived through the full pids limit")
			switch {
			case tc.lives && !lived:
				t.Fatalf("the process died while its pids limit was used up (%v); output:\n%s", err, out)
			case !tc.lives && lived:
				t.Fatalf("without reserved threads the process lived: the case did not need a new thread, so it proves nothing; output:\n%s", out)
			case !tc.lives && !threadRefused(out):
				t.Fatalf("the process without reserved threads failed for another reason (%v); output:\n%s", err, out)
			}
		})
	}
}

// runInPidsCgroup runs the test binary's test name as a child in a pids cgroup of its own under
// parent, limited to pidsMax, and returns its output and how it ended. The child finds its
// cgroup's directory in the variable childEnv and must read one byte from stdin before it
// starts anything: it is moved into the cgroup first.
func runInPidsCgroup(t *testing.T, parent, name string, pidsMax int, childEnv string, env ...string) (string, error) {
	t.Helper()
	cg := filepath.Join(parent, fmt.Sprintf("agent-operator-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-")))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("cannot make a pids cgroup: %v", err)
	}
	t.Cleanup(func() { emptyCgroup(t, cg) })
	writeFile(t, filepath.Join(cg, "pids.max"), strconv.Itoa(pidsMax))

	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+cg, "GOMAXPROCS=2"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Into the cgroup before it starts anything; then let it go.
	writeFile(t, filepath.Join(cg, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid))
	if _, err := stdin.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
		return out.String(), err
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the child did not end; output:\n%s", out.String())
		return "", nil
	}
}

// pidsChild is the process in the cgroup: it waits to be moved in, reserves threads, starts a
// fork bomb, waits until the cgroup is full and then blocks goroutines in system calls.
func pidsChild(cg string) {
	fail := func(format string, args ...any) {
		fmt.Printf(format+"\n", args...)
		os.Exit(1)
	}
	if _, err := os.Stdin.Read(make([]byte, 1)); err != nil {
		fail("wait for the cgroup: %v", err)
	}
	n, _ := strconv.Atoi(os.Getenv("EXECUTOR_TEST_RESERVE"))
	ReserveThreads(n)

	bomb := exec.Command("bash", "-c", ":(){ :|:& };:; sleep 60")
	bomb.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := bomb.Start(); err != nil {
		fail("start the bomb: %v", err)
	}
	defer func() {
		_ = syscall.Kill(-bomb.Process.Pid, syscall.SIGKILL)
		_ = bomb.Wait()
	}()
	full := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		cur, _ := os.ReadFile(filepath.Join(cg, "pids.current"))
		lim, _ := os.ReadFile(filepath.Join(cg, "pids.max"))
		if strings.TrimSpace(string(cur)) == strings.TrimSpace(string(lim)) {
			full = true
			break
		}
	}
	if !full {
		fail("the bomb did not fill the cgroup")
	}
	// Blocking pipes (not the runtime's poller): each read holds its thread.
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		fail("pipe: %v", err)
	}
	blocked := make(chan struct{}, blockers)
	read := make(chan error, blockers)
	for range blockers {
		go func() {
			blocked <- struct{}{}
			_, err := syscall.Read(fds[0], make([]byte, 1))
			read <- err
		}()
	}
	for range blockers {
		<-blocked
	}
	time.Sleep(300 * time.Millisecond) // the runtime hands the blocked threads' work on
	if _, err := syscall.Write(fds[1], make([]byte, blockers)); err != nil {
		fail("write: %v", err)
	}
	for range blockers {
		if err := <-read; err != nil {
			fail("read: %v", err)
		}
	}
	fmt.Println("lived through the full pids limit")
}

// threadRefused reports whether the Go runtime's crash output says the kernel refused a thread
// (the message of a build without cgo, like the sidecar's, or of one with it).
func threadRefused(out string) bool {
	return strings.Contains(out, "failed to create new OS thread") || strings.Contains(out, "pthread_create failed")
}

// pidsHierarchy returns the directory under which a pids cgroup can be made, or skips.
func pidsHierarchy(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a pids cgroup")
	}
	if fi, err := os.Stat("/sys/fs/cgroup/pids"); err == nil && fi.IsDir() {
		return "/sys/fs/cgroup/pids" // cgroup v1
	}
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && strings.Contains(string(ctl), "pids") {
		return "/sys/fs/cgroup" // cgroup v2 with the pids controller delegated
	}
	t.Skip("no writable pids cgroup hierarchy")
	return ""
}

// emptyCgroup stops new forks in cg, kills what is left in it and removes it.
func emptyCgroup(t *testing.T, cg string) {
	t.Helper()
	_ = os.WriteFile(filepath.Join(cg, "pids.max"), []byte("0"), 0o644)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		procs, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
		if err != nil {
			break
		}
		fields := strings.Fields(string(procs))
		if len(fields) == 0 {
			if err := os.Remove(cg); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			continue
		}
		for _, f := range fields {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	t.Errorf("could not empty and remove %s", cg)
}

func writeFile(t *testing.T, name, value string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(value), 0o644); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
}
