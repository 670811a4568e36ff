package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

// BinaryName is the file name copy-to installs.
const BinaryName = "executor-sidecar"

// installMode is the mode copy-to gives the installed binary: executable but
// readable by no one. The kernel makes a process started from a binary its
// user cannot read non-dumpable from its first instruction, so the
// workload (same uid, on a read-only mount it cannot chmod) can never open
// the sidecar's /proc/PID/fd/* or read its memory, not even in the moment
// before serve calls executor.ProtectProcess.
const installMode = 0o111

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	log := funcr.New(func(prefix, a string) { fmt.Fprintln(stderr, prefix, a) }, funcr.Options{})
	var err error
	switch args[0] {
	case "serve":
		err = protect()
		if err == nil {
			err = serve(args[1:], stdin, stdout, log)
		}
	case "idle":
		err = protect()
		if err == nil {
			err = idle()
		}
	case "copy-to":
		if len(args) != 2 {
			usage(stderr)
			return 2
		}
		err = copyTo(args[1])
	case "best-effort":
		bestEffort(args[1:], stderr)
		return 0
	case "version":
		fmt.Fprintf(stdout, "executor-sidecar %s (protocol %d, %s, %s/%s)\n", version, executor.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	case "-h", "--help", "help":
		usage(stdout)
	default:
		fmt.Fprintf(stderr, "executor-sidecar: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "executor-sidecar: %v\n", err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  executor-sidecar serve --root DIR [--env-policy core|all|none] [--max-frame BYTES] [--owner-dir DIR] [--reserve-threads N]
  executor-sidecar idle
  executor-sidecar copy-to DIR
  executor-sidecar best-effort [--timeout DURATION] -- COMMAND [ARG...]
  executor-sidecar version
`)
}

// protect makes this process non-dumpable before it touches the control
// stream: commands it starts (same uid) cannot open its descriptors, read
// its memory (the stream key) or ptrace it.
func protect() error {
	if err := executor.ProtectProcess(); err != nil {
		return fmt.Errorf("refusing to run unprotected: %w", err)
	}
	return nil
}

func serve(args []string, stdin io.Reader, stdout io.Writer, log logr.Logger) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	root := fs.String("root", "/workspace", "directory that file operations are confined to")
	policy := fs.String("env-policy", string(tool.EnvInheritCore), "environment inherited by commands: core, all or none")
	maxFrame := fs.Int("max-frame", executor.DefaultMaxFrame, "largest frame accepted or sent, in bytes")
	confine := fs.Bool("confine", true, "confine file paths to --root")
	ownerDir := fs.String("owner-dir", executor.DefaultOwnerDir, "directory of the pod's session owner records, shared by all serve processes of the pod (created 0700)")
	reserve := fs.Int("reserve-threads", executor.DefaultReservedThreads, "OS threads started ahead, so a fork bomb that uses the pod's process limit up cannot starve this process of one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Beside the handshake, not before it: a fresh process takes about a
	// millisecond (up to ten on a busy node) to start them, and no command
	// can run before the handshake is done.
	go executor.ReserveThreads(*reserve)
	env, err := localenv.New(*root,
		localenv.WithEnvPolicy(tool.EnvPolicy(*policy)),
		localenv.WithConfinement(*confine),
	)
	if err != nil {
		return err
	}
	defer env.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("serving", "root", *root, "version", version)
	if err := executor.Serve(ctx, stdin, stdout, env, executor.ServeOptions{MaxFrame: *maxFrame, Log: log, OwnerDir: *ownerDir}); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// IdleReady is the line idle prints once its signal handlers are installed:
// from then on SIGTERM ends it with exit code 0.
const IdleReady = "executor-sidecar idle: ready"

// idleReservedThreads is how many threads idle starts ahead (see
// executor.ReserveThreads). It blocks in no system call of its own, but it
// is the container's first process: if the runtime were refused a thread
// while a fork bomb holds the pod's process limit, the container would end.
const idleReservedThreads = 4

// idle waits for SIGTERM or SIGINT and reaps children meanwhile.
func idle() error {
	executor.ReserveThreads(idleReservedThreads)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	fmt.Println(IdleReady)
	reap()
	for s := range sigs {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		return nil
	}
	return nil
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// copyTo installs the running binary as dir/executor-sidecar atomically.
func copyTo(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("copy-to: find own binary: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("copy-to: %w", err)
	}
	defer src.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("copy-to: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+BinaryName+".tmp-*")
	if err != nil {
		return fmt.Errorf("copy-to: %w", err)
	}
	_, err = io.Copy(tmp, src)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), installMode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, BinaryName))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("copy-to: %w", err)
	}
	return nil
}
