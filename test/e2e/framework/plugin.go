package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildPlugin builds the kubectl plugin (cmd/kubectl-agent) into dir and
// returns the binary's path.
func BuildPlugin(ctx context.Context, dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "kubectl-agent")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/kubectl-agent")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/kubectl-agent: %w\n%s", err, out)
	}
	return bin, nil
}

// PluginResult is what one run of the plugin printed and its exit code.
type PluginResult struct {
	Stdout, Stderr string
	ExitCode       int
}

// RunPlugin runs the plugin binary with args against the cluster of
// kubeconfig. A non-zero exit is reported in ExitCode, not as an error;
// errors mean the binary could not run or ctx ended.
func RunPlugin(ctx context.Context, bin, kubeconfig string, args ...string) (PluginResult, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := PluginResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ctx.Err() == nil:
		res.ExitCode = ee.ExitCode()
		return res, nil
	case err != nil:
		return res, fmt.Errorf("run %s %q: %w (stderr: %s)", bin, args, err, res.Stderr)
	}
	return res, nil
}
