package executor

import (
	"runtime"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/proctest"
)

// threads counts the OS threads of this process, or skips where it cannot.
func threads(t *testing.T) int {
	t.Helper()
	n, err := proctest.Threads()
	if err != nil {
		t.Skip(err)
	}
	return n
}

// TestReserveThreadsKeepsThemIdle checks that the reserved threads exist,
// and still exist after the goroutines that made them have returned and
// the process has been idle and collected garbage: a command's wait then
// finds an idle thread instead of asking the kernel for one.
func TestReserveThreadsKeepsThemIdle(t *testing.T) {
	// More than the process has, so the reserve must start threads.
	n := threads(t) + 8
	ReserveThreads(n)
	// n goroutines were locked to a thread each while another ran.
	if got := threads(t); got < n+1 {
		t.Fatalf("after ReserveThreads(%d): %d threads, want at least %d", n, got, n+1)
	}
	runtime.GC()
	time.Sleep(200 * time.Millisecond)
	runtime.GC()
	if got := threads(t); got < n+1 {
		t.Fatalf("threads were ended while idle: %d left, want at least %d", got, n+1)
	}
}

func TestReserveThreadsOfNoneDoesNothing(t *testing.T) {
	before := threads(t)
	ReserveThreads(0)
	ReserveThreads(-1)
	if after := threads(t); after > before {
		t.Fatalf("ReserveThreads(0) started threads: %d before, %d after", before, after)
	}
}
