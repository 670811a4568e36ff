package loop_test

import (
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitPidFile polls for a file holding a pid.
func waitPidFile(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond) // polling a file another process writes
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

// processAlive reports whether pid still runs (zombies count as gone).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] != "Z"
}

func newBenchEnv(b *testing.B) (*localenv.Env, error) {
	return localenv.New(b.TempDir())
}
