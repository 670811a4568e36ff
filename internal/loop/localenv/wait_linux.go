package localenv

import (
	"os"

	"golang.org/x/sys/unix"
)

// awaitExit returns once the process pid (a child not yet waited for) has
// exited, waiting on a pidfd through the Go runtime's poller: a command
// that runs for an hour holds no OS thread meanwhile, where exec.Cmd.Wait
// blocks one in waitid for as long as the command runs. The executor
// sidecar shares the pod's process limit with its commands (threads count
// against it), so its thread count must not grow with the commands it
// runs. Where a pidfd cannot be had or polled it returns at once, and the
// caller's Wait blocks a thread as before.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// A pidfd is readable once its process has exited.
	_ = rc.Read(func(fd uintptr) bool {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return n > 0 || (err != nil && err != unix.EINTR)
	})
}
