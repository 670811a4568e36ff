package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/k8senv"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// unreachableEnv is a local environment whose first command waits, as a
// k8senv call does while the API server is unavailable: it reports an
// error to the Wait of its context until released, then that the stream
// opened.
type unreachableEnv struct {
	tool.ExecutionEnvironment
	waits   chan k8senv.Wait
	release chan struct{}
}

func (e *unreachableEnv) ExecCommand(ctx context.Context, command string, opts tool.ExecOptions) (*tool.ExecResult, error) {
	w, ok := k8senv.WaitFrom(ctx)
	if !ok {
		return nil, errors.New("the call's context has no k8senv.Wait")
	}
	select {
	case e.waits <- w:
		w.Report(errors.New("the server is currently unable to handle the request"))
		select {
		case <-e.release:
		case <-w.Context.Done():
			return nil, context.Cause(w.Context)
		}
		w.Report(nil)
	default: // later calls do not wait
	}
	return e.ExecutionEnvironment.ExecCommand(ctx, command, opts)
}

// A tool call that waits for the workspace's stream makes the runner say
// so (Progress.WorkspaceUnavailable, the WorkspaceAvailable condition) at
// once; the input goes on when the stream opens, and the runner says the
// wait ended. The wait lives by the input and has the runner's tolerance.
func TestToolCallWaitingForTheWorkspaceIsReported(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	local, err := localenv.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := &unreachableEnv{ExecutionEnvironment: local, waits: make(chan k8senv.Wait, 1), release: make(chan struct{})}
	script := &scripted.Script{Turns: []scripted.Turn{
		{Text: "Running.", ToolCalls: []scripted.ToolCall{{Name: "shell", Arguments: []byte(`{"command": "echo ran"}`)}}},
		{Text: "done"},
	}}
	r := scriptedRunner(t, pub, script, func() (tool.ExecutionEnvironment, error) { return env, nil },
		func(o *Options) { o.WorkspaceOutageTolerance = 3 * time.Hour })
	obj := demoSession("unreachable", "run it")
	if err := r.Ensure(obj, "pod"); err != nil {
		t.Fatal(err)
	}
	var w k8senv.Wait
	select {
	case w = <-env.waits:
	case <-time.After(time.Minute):
		t.Fatal("no tool call got to the environment")
	}
	if w.Tolerance != 3*time.Hour {
		t.Errorf("tolerance = %s, want Options.WorkspaceOutageTolerance", w.Tolerance)
	}
	p := waitProgress(t, r, obj.UID, "the wait reported", func(p Progress) bool { return p.WorkspaceUnavailable != "" })
	if !strings.Contains(p.WorkspaceUnavailable, "unable to handle the request") || p.WorkspaceUnavailableSince.IsZero() {
		t.Errorf("progress = %q since %s, want the error and when the wait began", p.WorkspaceUnavailable, p.WorkspaceUnavailableSince)
	}
	if p.Phase != agentsv1.PhaseRunning || w.Context.Err() != nil {
		t.Errorf("phase %s, wait context %v: the input should go on waiting", p.Phase, w.Context.Err())
	}
	close(env.release)
	p = waitProgress(t, r, obj.UID, "the input ended", func(p Progress) bool { return p.Phase == agentsv1.PhaseSucceeded })
	if p.WorkspaceUnavailable != "" || !p.WorkspaceUnavailableSince.IsZero() {
		t.Errorf("progress still says %q since %s after the stream opened", p.WorkspaceUnavailable, p.WorkspaceUnavailableSince)
	}
	if p.ToolCalls != 1 {
		t.Errorf("tool calls = %d, want 1", p.ToolCalls)
	}
}
