package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// workloadUID is the uid workspace pods run as. When the tests run as root
// they run the sidecar and its commands as this uid (root's CAP_SYS_PTRACE
// would bypass the protection under test); otherwise as the current user.
// Either way the commands share the sidecar's uid, as in a pod.
const workloadUID = 65532

func asWorkload(cmd *exec.Cmd) {
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: workloadUID, Gid: workloadUID}}
	}
}

// sharedDir is a temporary directory the workload uid can enter, with a
// workspace subdirectory it owns.
func sharedDir(t *testing.T) (dir, workspace string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "controlstream-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	workspace = filepath.Join(dir, "workspace")
	if err := os.Mkdir(workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(workspace, workloadUID, workloadUID); err != nil {
			t.Fatal(err)
		}
	}
	return dir, workspace
}

// workloadPipes gives cmd stdin and stdout pipes owned by the workload uid,
// as a container runtime does for an exec'd process (runc chowns its stdio
// to the process's user), so only the sidecar's own protection stands
// between its commands and these pipes. It returns the test's ends.
func workloadPipes(t *testing.T, cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		for _, f := range []*os.File{inR, outW} {
			if err := f.Chown(workloadUID, workloadUID); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	return inW, outR
}

// forgedFrames is what a hostile command writes to every descriptor it can
// reach: version 1 result and output frames for every likely call id,
// garbage, and a length prefix promising far more than follows.
func forgedFrames(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	for id := uint64(1); id <= 32; id++ {
		for _, f := range []*executor.Frame{
			{ID: id, Kind: executor.KindOutput, Data: []byte("FORGED output\n")},
			{ID: id, Kind: executor.KindResult, Body: json.RawMessage(`{"stdout":"FORGED result\n","exitCode":0}`)},
		} {
			enc, err := executor.EncodeFrame(f, 0)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(enc)
		}
	}
	b.WriteString("FORGED garbage")
	b.Write([]byte{0x01, 0xff, 0xff, 0xff})
	return b.Bytes()
}

// forgeScript writes forged frames to every descriptor of the sidecar
// ($PPID and $EXECUTOR_PID) and of PID 1 and says which it could open.
const forgeScript = `echo "ppid=$PPID"
for f in /proc/$PPID/fd/* /proc/$EXECUTOR_PID/fd/* /proc/1/fd/*; do
  if cat forged.bin 2>/dev/null >"$f"; then echo "wrote $f"; else echo "refused $f"; fi
done 2>/dev/null
echo genuine-end`

func TestCommandsCannotForgeTheControlStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
	}{
		// As copy-to installs it: non-dumpable from exec, then prctl.
		{"installed unreadable", installMode},
		// A readable binary: prctl in serve alone protects it.
		{"readable binary", 0o755},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, workspace := sharedDir(t)
			bin := filepath.Join(dir, "bin")
			if out, err := exec.Command(binary, "copy-to", bin).CombinedOutput(); err != nil {
				t.Fatalf("copy-to: %v: %s", err, out)
			}
			installed := filepath.Join(bin, BinaryName)
			if err := os.Chmod(installed, tc.mode); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(installed, "serve", "--root", workspace)
			asWorkload(cmd)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdin, stdout := workloadPipes(t, cmd)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmd.Stdin.(*os.File).Close()
			cmd.Stdout.(*os.File).Close()
			t.Cleanup(func() { stdin.Close(); cmd.Wait() })
			c, err := executor.NewClientContext(t.Context(), conn{stdout, stdin})
			if err != nil {
				t.Fatalf("handshake: %v (stderr: %s)", err, stderr.String())
			}
			t.Cleanup(func() { c.Close() })
			ctx := t.Context()
			if err := c.WriteFile(ctx, "forged.bin", forgedFrames(t)); err != nil {
				t.Fatal(err)
			}
			var streamed strings.Builder
			pid := cmd.Process.Pid
			res, err := c.ExecCommand(ctx, forgeScript, tool.ExecOptions{
				Env:      map[string]string{"EXECUTOR_PID": fmt.Sprint(pid)},
				OnOutput: func(b []byte) { streamed.Write(b) },
			})
			if err != nil {
				t.Fatalf("the hostile command's call failed: %v (stderr: %s)", err, stderr.String())
			}
			// The result is the command's own: a forged result frame would
			// have made it "FORGED result".
			if !strings.HasPrefix(res.Stdout, fmt.Sprintf("ppid=%d\n", pid)) || !strings.HasSuffix(res.Stdout, "genuine-end\n") {
				t.Fatalf("the result is not the command's own (forged?): %q", res.Stdout)
			}
			if strings.Contains(streamed.String(), "FORGED") {
				t.Errorf("forged bytes were streamed as output: %q", streamed.String())
			}
			if strings.Contains(res.Stdout, fmt.Sprintf("wrote /proc/%d/", pid)) || !strings.Contains(res.Stdout, fmt.Sprintf("refused /proc/%d/fd", pid)) {
				t.Errorf("the command reached the sidecar's descriptors:\n%s", res.Stdout)
			}
			// The stream goes on.
			again, err := c.ExecCommand(ctx, "echo still here", tool.ExecOptions{})
			if err != nil || again.Stdout != "still here\n" || c.Err() != nil {
				t.Errorf("call after the attack = %+v, %v (stream: %v)", again, err, c.Err())
			}
		})
	}
}

// TestUnreadableBinaryStartsNonDumpable checks the kernel behaviour the
// 0111 install relies on, on this machine: a process started from a binary
// its user cannot read is non-dumpable from exec, so another process of the
// same uid cannot list its descriptors; from a readable copy it can.
func TestUnreadableBinaryStartsNonDumpable(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	src, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode      os.FileMode
		reachable bool
	}{
		{0o755, true},
		{0o111, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			dir, _ := sharedDir(t)
			bin := filepath.Join(dir, "sleep")
			if err := os.WriteFile(bin, src, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(bin, tc.mode); err != nil {
				t.Fatal(err)
			}
			target := exec.Command(bin, "600")
			asWorkload(target)
			if err := target.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { target.Process.Kill(); target.Wait() })
			probe := exec.Command("/bin/sh", "-c", fmt.Sprintf("ls /proc/%d/fd", target.Process.Pid))
			asWorkload(probe)
			out, err := probe.CombinedOutput()
			if reached := err == nil; reached != tc.reachable {
				t.Errorf("listing the fds of a process started from a %s binary: %v (%s); want reachable=%v", tc.mode, err, out, tc.reachable)
			}
		})
	}
}

var _ io.Closer = conn{}
