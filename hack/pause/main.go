// Command pause is the pod sandbox ("infra container") image of the local cluster.
//
// It sleeps until it receives SIGTERM or SIGINT and then exits 0. As PID 1 of a pod that
// shares its PID namespace it also reaps orphaned children, so no zombie accumulates.
// Build it statically (CGO_ENABLED=0); hack/images puts it into agent-operator/pause:dev.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
