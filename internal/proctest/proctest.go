package proctest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Gone polls for up to within until pid no longer exists or is a zombie
// waiting for its reaper, and reports whether it went.
func Gone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
			s := string(b)
			if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] == "Z" {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond) // polling another process's state
	}
	return false
}

// Build compiles the Go package pkg statically (CGO_ENABLED=0) into a
// binary called name in a new temporary directory, passing the compiler's
// errors to stderr. It returns the binary's path and a function removing
// the directory.
func Build(pkg, name string) (string, func(), error) {
	dir, err := os.MkdirTemp("", name+"-test")
	if err != nil {
		return "", nil, fmt.Errorf("create build directory: %w", err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("build %s: %w", name, err)
	}
	return bin, cleanup, nil
}

// Threads counts the OS threads of the calling process (Linux's
// /proc/self/task).
func Threads() (int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("count threads: %w", err)
	}
	return len(tasks), nil
}
