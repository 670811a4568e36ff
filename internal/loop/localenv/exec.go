package localenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// pipeDrain bounds how long ExecCommand waits for the output pipes after
// the shell exited or the group was killed. Processes of the group that
// still hold them then (e.g. `server &` without redirection) are killed;
// background processes whose output is redirected elsewhere survive.
const pipeDrain = time.Second

// ExecCommand runs command with `shell -c` in a new process group. A non-zero
// exit is a result. On timeout the group receives SIGTERM, then SIGKILL after
// the grace period, and the result has TimedOut set and the partial output.
// On ctx cancellation the same happens and both the partial result and an
// error wrapping ctx.Err() are returned. A start the kernel refuses for now
// (the process limit used up) is tried again within the timeout.
func (e *Env) ExecCommand(ctx context.Context, command string, opts tool.ExecOptions) (*tool.ExecResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dir, err := e.workingDir("exec", opts.WorkingDir)
	if err != nil {
		return nil, err
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("exec: %w", err)
	}
	env := FilterEnv(e.baseEnv(), e.cfg.policy, opts.Env)
	shell := func() *exec.Cmd {
		cmd := exec.Command(e.cfg.shell, "-c", command)
		cmd.Dir = dir
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = outW, errW
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}

	start := time.Now()
	deadline := start.Add(timeout)
	cmd, err := startRetrying(ctx, deadline, shell)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("exec: start %s: %w", e.cfg.shell, err)
	}
	pgid := cmd.Process.Pid

	var mu sync.Mutex // serialises OnOutput
	stdout := &capBuf{max: e.cfg.maxOutput}
	stderr := &capBuf{max: e.cfg.maxOutput}
	var readers sync.WaitGroup
	pump := func(r *os.File, buf *capBuf) {
		defer readers.Done()
		chunk := make([]byte, 32<<10)
		for {
			n, err := r.Read(chunk)
			if n > 0 {
				mu.Lock()
				buf.Write(chunk[:n])
				if opts.OnOutput != nil {
					opts.OnOutput(bytes.Clone(chunk[:n]))
				}
				mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}
	readers.Add(2)
	go pump(outR, stdout)
	go pump(errR, stderr)
	readersDone := make(chan struct{})
	go func() { readers.Wait(); close(readersDone) }()

	waitCh := make(chan error, 1)
	go func() { waitCh <- waitCmd(cmd) }()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var (
		waitErr  error
		timedOut bool
		ctxErr   error
	)
	select {
	case waitErr = <-waitCh:
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
		ctxErr = ctx.Err()
	}
	if timedOut || ctxErr != nil {
		waitErr = e.terminateGroup(pgid, waitCh)
	}

	// Wait for the pipes: a grandchild may still hold them.
	select {
	case <-readersDone:
	case <-time.After(pipeDrain):
		// Whatever still holds the output is killed with its group.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		outR.Close()
		errR.Close()
		<-readersDone
	}
	outR.Close()
	errR.Close()

	res := &tool.ExecResult{
		Stdout:   stdout.String(),
		Stderr:   stderr.String(),
		TimedOut: timedOut,
		Duration: time.Since(start),
		ExitCode: exitCode(cmd, waitErr),
	}
	if ctxErr != nil {
		return res, fmt.Errorf("exec: %w", ctxErr)
	}
	return res, nil
}

// startRetrying starts the command newCmd makes and, while the kernel
// refuses the new process for now (EAGAIN: the pod's process limit is used
// up, most often by the processes of a group just killed that are not yet
// reaped, or by a fork bomb), makes it anew and tries again with a growing
// pause, as bash does with its own forks, until deadline or ctx's end. Any
// other error is returned at once.
func startRetrying(ctx context.Context, deadline time.Time, newCmd func() *exec.Cmd) (*exec.Cmd, error) {
	pause := 10 * time.Millisecond
	for {
		cmd := newCmd()
		err := cmd.Start()
		if err == nil {
			return cmd, nil
		}
		if !errors.Is(err, syscall.EAGAIN) {
			return nil, err
		}
		if time.Until(deadline) < pause {
			return nil, fmt.Errorf("the process limit stayed used up until the time to start was up: %w", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (while the process limit was used up: %w)", ctx.Err(), err)
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// terminateGroup sends SIGTERM to the group, waits for the leader up to the
// grace period, then SIGKILLs whatever is left of the group (members may
// ignore SIGTERM even when the leader has died) and returns the leader's
// wait error.
func (e *Env) terminateGroup(pgid int, waitCh <-chan error) error {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	grace := time.NewTimer(e.cfg.killGrace)
	defer grace.Stop()
	var waitErr error
	exited := false
	select {
	case waitErr = <-waitCh:
		exited = true
		// Give the rest of the group the remainder of the grace period.
		if groupAlive(pgid) {
			<-grace.C
		}
	case <-grace.C:
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if !exited {
		waitErr = <-waitCh
	}
	return waitErr
}

// groupAlive reports whether any process of the group still exists.
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

func exitCode(cmd *exec.Cmd, waitErr error) int {
	ps := cmd.ProcessState
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		return ee.ExitCode()
	}
	return ps.ExitCode()
}

// capBuf keeps the first max bytes written and counts the rest.
type capBuf struct {
	buf     bytes.Buffer
	max     int
	dropped int64
}

var _ io.Writer = (*capBuf)(nil)

func (c *capBuf) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if room >= len(p) {
		c.buf.Write(p)
		return len(p), nil
	}
	if room > 0 {
		c.buf.Write(p[:room])
	}
	c.dropped += int64(len(p) - max(room, 0))
	return len(p), nil
}

func (c *capBuf) String() string {
	if c.dropped == 0 {
		return c.buf.String()
	}
	return fmt.Sprintf("%s\n[output truncated: %d more bytes dropped]\n", c.buf.String(), c.dropped)
}

// workingDir resolves wd (empty: the root) to the absolute directory a
// command of op runs in; it must exist under the root and be a directory.
func (e *Env) workingDir(op, wd string) (string, error) {
	if wd == "" {
		return e.canonRoot, nil
	}
	rel, err := e.resolve(wd)
	if err != nil {
		return "", fmt.Errorf("%s: working directory: %w", op, err)
	}
	st, err := e.fsys.Stat(rel)
	if err != nil {
		return "", mapErr(op+": working directory", wd, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s: working directory %s is not a directory", op, wd)
	}
	return e.abs(rel), nil
}

// waitCmd is cmd.Wait, after the process's exit was awaited without holding
// an OS thread where the platform allows it (awaitExit).
func waitCmd(cmd *exec.Cmd) error {
	awaitExit(cmd.Process.Pid)
	return cmd.Wait()
}
