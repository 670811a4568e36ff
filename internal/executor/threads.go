package executor

import (
	"runtime"
	"sync"
)

// DefaultReservedThreads is how many OS threads the executor sidecar's
// serve starts ahead (ReserveThreads). It covers the threads the stream and
// a few running commands block in, with room to spare, and is small beside
// a pod's process limit (the kubelet's podPidsLimit, often 1024).
const DefaultReservedThreads = 24

// ReserveThreads makes the Go runtime start n OS threads now and keep them
// idle for later use.
//
// The executor shares the pod's process limit (the pids cgroup, which
// counts threads) with the commands it runs. A fork bomb uses that limit up
// for as long as it lives. The Go runtime starts a thread whenever a
// goroutine blocks in a system call (a command's wait, the stream's read
// or write) and no idle thread is left, and it exits the process (exit
// code 2) when the kernel refuses one: the stream, and the session's calls,
// would die with the bomb. The runtime never ends an idle thread, so
// threads started here are reused instead of started while the limit is
// used up.
//
// Each goroutine locks itself to a thread and blocks until all n have, so
// the runtime must start a thread for each; they then unlock and return,
// and their threads go to the runtime's idle list.
func ReserveThreads(n int) {
	if n <= 0 {
		return
	}
	var locked sync.WaitGroup
	release := make(chan struct{})
	var done sync.WaitGroup
	locked.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	close(release)
	done.Wait()
}
