package localenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessStartWait is how long StartProcess, when its ctx has no deadline,
// keeps starting a process the kernel refuses for now because the process
// limit is used up.
const ProcessStartWait = 30 * time.Second

// DefaultStderrTail is how many of the last bytes of a long-running
// process's stderr are kept for error messages.
const DefaultStderrTail = 4 << 10

// ProcessOptions configures StartProcess.
type ProcessOptions struct {
	// WorkingDir is resolved like ExecOptions.WorkingDir (default: the root).
	WorkingDir string
	// Env is added on top of the filtered environment.
	Env map[string]string
	// StderrTail is how many of the last bytes of stderr are kept
	// (0: DefaultStderrTail).
	StderrTail int
}

// Process is a long-running process started by StartProcess, in its own
// process group: Read reads its stdout, Write writes its stdin, CloseStdin
// closes its stdin, and Close ends the whole group. It is an
// io.ReadWriteCloser, so an MCP client can speak to a stdio server over it.
type Process struct {
	cmd    *exec.Cmd
	pgid   int
	stdin  *os.File
	stdout *os.File
	stderr *tailBuf
	grace  time.Duration

	done    chan struct{} // closed once the leader was reaped and stderr drained
	waitErr error         // set before done is closed

	closeOnce sync.Once
}

// StartProcess starts argv (no shell) in a new process group with the
// filtered environment plus opts.Env, in opts.WorkingDir under the root. ctx
// bounds the start only (while the process limit is used up the start is
// tried again until ctx's deadline, or ProcessStartWait without one); the
// process runs until it exits or Close is called.
func (e *Env) StartProcess(ctx context.Context, argv []string, opts ProcessOptions) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start process: %w", err)
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("start process: empty command")
	}
	dir, err := e.workingDir("start process", opts.WorkingDir)
	if err != nil {
		return nil, err
	}
	tail := opts.StderrTail
	if tail <= 0 {
		tail = DefaultStderrTail
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, fmt.Errorf("start process: %w", err)
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("start process: %w", err)
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("start process: %w", err)
	}
	env := FilterEnv(e.baseEnv(), e.cfg.policy, opts.Env)
	newCmd := func() *exec.Cmd {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		cmd.Env = env
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}
	// A process limit used up for now (the processes of a group just
	// killed, not yet reaped) delays the start, as it does a command's.
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(ProcessStartWait)
	}
	cmd, err := startRetrying(ctx, deadline, newCmd)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("start process %s: %w", argv[0], err)
	}
	p := &Process{cmd: cmd, pgid: cmd.Process.Pid, stdin: inW, stdout: outR, stderr: &tailBuf{max: tail},
		grace: e.cfg.killGrace, done: make(chan struct{})}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		_, _ = io.Copy(p.stderr, errR)
	}()
	go func() {
		err := waitCmd(cmd)
		// Give stderr a moment: a group member may still hold it.
		select {
		case <-stderrDone:
		case <-time.After(pipeDrain):
		}
		errR.Close()
		p.waitErr = err
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process's id, which is also its process group's id.
func (p *Process) Pid() int { return p.pgid }

// Read reads the process's stdout.
func (p *Process) Read(b []byte) (int, error) { return p.stdout.Read(b) }

// Write writes to the process's stdin.
func (p *Process) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// CloseStdin closes the process's stdin (it reads end of file).
func (p *Process) CloseStdin() error { return p.stdin.Close() }

// Done is closed when the process has exited (its stderr is then complete).
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode returns the exit code once Done is closed (128+n when killed by
// signal n), or -1 while the process runs.
func (p *Process) ExitCode() int {
	select {
	case <-p.done:
		return exitCode(p.cmd, p.waitErr)
	default:
		return -1
	}
}

// Stderr returns the last bytes of the process's stderr seen so far.
func (p *Process) Stderr() string { return p.stderr.String() }

// Close ends the process group: SIGTERM, then SIGKILL after the grace
// period (also for members that outlive the leader), and closes the pipes.
// It waits for the leader to be reaped.
func (p *Process) Close() error {
	p.closeOnce.Do(func() {
		p.stdin.Close()
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
			t := time.NewTimer(p.grace)
			select {
			case <-p.done:
			case <-t.C:
			}
			t.Stop()
		}
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		<-p.done
		p.stdout.Close()
	})
	return nil
}

// ExitError describes how the process ended (a *ProcessExit once it has).
func (p *Process) ExitError() error {
	code := p.ExitCode()
	if code == -1 {
		return fmt.Errorf("process %s is still running", p.cmd.Path)
	}
	return &ProcessExit{Command: p.cmd.Path, ExitCode: code, Stderr: p.Stderr()}
}

// ProcessExit says how a process of StartProcess ended. It unwraps to
// io.EOF after exit code 0.
type ProcessExit struct {
	Command  string
	ExitCode int
	Stderr   string // the end of its stderr
}

func (e *ProcessExit) Error() string {
	msg := fmt.Sprintf("process %s exited with code %d", e.Command, e.ExitCode)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += "; its stderr ends with: " + s
	}
	return msg
}

// Unwrap returns io.EOF after a clean exit.
func (e *ProcessExit) Unwrap() error {
	if e.ExitCode == 0 {
		return io.EOF
	}
	return nil
}

// tailBuf keeps the last max bytes written.
type tailBuf struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped bool
}

func (t *tailBuf) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.dropped = true
	}
	return len(p), nil
}

func (t *tailBuf) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropped {
		return "..." + string(t.buf)
	}
	return string(t.buf)
}

// StartStdio starts argv like StartProcess and returns it as a stream: Read
// reads its stdout and, once the process has exited, returns an error
// saying how it ended (exit code and the end of its stderr); Write writes
// its stdin; Close ends its process group. It is what an MCP client needs
// to speak to a stdio server run on this machine.
func (e *Env) StartStdio(ctx context.Context, argv []string, env map[string]string, workingDir string) (io.ReadWriteCloser, error) {
	p, err := e.StartProcess(ctx, argv, ProcessOptions{WorkingDir: workingDir, Env: env})
	if err != nil {
		return nil, err
	}
	return stdioProcess{p}, nil
}

// stdioProcess is a Process whose Read reports how the process ended.
type stdioProcess struct{ *Process }

func (s stdioProcess) Read(b []byte) (int, error) {
	n, err := s.Process.Read(b)
	if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
		select {
		case <-s.done:
			return n, s.ExitError()
		case <-time.After(pipeDrain):
			return n, fmt.Errorf("process %s closed its stdout: %w", s.cmd.Path, err)
		}
	}
	return n, err
}
