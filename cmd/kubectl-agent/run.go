package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/render"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// Exit codes of `run --wait` and `run --follow` (1 is any other error).
const (
	exitFailed        = 2
	exitAborted       = 3
	exitTimeout       = 4
	exitAwaitingInput = 5
)

// catchUpGrace bounds the wait for the last events to be printed once the
// status says the session ended.
const catchUpGrace = 15 * time.Second

type runOptions struct {
	class                                                                                   string
	name, prompt, provider, model, apiKeySecret, baseURL, script, image, instructions, file string
	maxTurns                                                                                int32
	follow, wait                                                                            bool
	timeout, pollInterval                                                                   time.Duration
	logs                                                                                    logsOptions
	// outputDir, when set, receives the session's change (outputs.go).
	outputDir string
}

func newRunCmd(g *globals) *cobra.Command {
	o := &runOptions{pollInterval: time.Second}
	cmd := &cobra.Command{
		Use:   "run [PROMPT | -]",
		Short: "Create an AgentSession from flags (the prompt from the argument, --prompt or stdin with -) or from a manifest (--filename)",
		Long: `Create an AgentSession from flags or from a manifest.

With --wait or --follow, run waits until the session ends and exits with its
outcome, for CI pipelines: 0 Succeeded, 2 Failed, 3 Aborted, 4 --timeout
passed, 5 awaiting input (the agent asked a question), 1 any other error.
--follow also prints the session's events live; --wait prints the result.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			var s *v1alpha1.AgentSession
			if o.file != "" {
				if len(args) > 0 || o.prompt != "" {
					return fmt.Errorf("run: a prompt cannot be combined with --filename: put it in the manifest")
				}
				s, err = sessionFromFile(o.file, ns, o.name, cmd.InOrStdin())
			} else {
				o.prompt, err = readText(o.prompt, args, cmd.InOrStdin())
				if err == nil {
					s, err = buildSession(ns, o)
				}
			}
			if err != nil {
				return err
			}
			if err := c.Create(cmd.Context(), s); err != nil {
				return fmt.Errorf("create agentsession: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "agentsession.agent-operator.dev/%s created\n", s.Name)
			if !o.follow && !o.wait && o.outputDir == "" {
				fmt.Fprintln(cmd.OutOrStdout(), s.Name)
				return nil
			}
			// The result, errors and events come from the model: printed
			// sanitized (FR-OUT-02).
			err = g.await(cmd.Context(), render.NewWriter(cmd.OutOrStdout()), render.NewWriter(cmd.ErrOrStderr()), c, s, o)
			if o.outputDir != "" && err == nil {
				err = g.writeOutputs(cmd.Context(), c, s, o.outputDir, o.pollInterval)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.name, "name", "", "session name (default: generated agent-xxxxx)")
	f.StringVarP(&o.file, "filename", "F", "", "AgentSession manifest (YAML or JSON; - reads stdin) instead of the session flags")
	f.StringVar(&o.prompt, "prompt", "", "the task")
	f.StringVar(&o.provider, "provider", string(v1alpha1.ProviderAnthropic), "anthropic, openai, openai-compatible, gemini or scripted")
	f.StringVar(&o.model, "model", "", "model name (required without --filename)")
	f.StringVar(&o.apiKeySecret, "api-key-secret", "", "Secret holding the API key, as NAME/KEY")
	f.StringVar(&o.baseURL, "base-url", "", "API endpoint (required for openai-compatible)")
	f.StringVar(&o.script, "script-configmap", "", "ConfigMap of the scripted provider, as NAME or NAME/KEY")
	f.StringVar(&o.image, "image", "", "workspace image")
	f.StringVar(&o.instructions, "instructions", "", "extra system prompt instructions")
	f.Int32Var(&o.maxTurns, "max-turns", 0, "turn limit (0: unlimited)")
	f.StringVar(&o.class, "class", "", "operator install to run it (the agent-operator.dev/class label; empty: the default install)")
	f.BoolVarP(&o.follow, "follow", "f", false, "print the session's events live until it ends, then exit with its outcome (implies --wait)")
	f.BoolVarP(&o.wait, "wait", "w", false, "wait until the session ends, print its result and exit with its outcome")
	f.DurationVar(&o.timeout, "timeout", 0, "with --wait or --follow, give up after this long with exit code 4 (0: no limit; the session keeps running)")
	f.IntVar(&o.logs.maxOutputLines, "max-output-lines", 40, "with -f, tool output lines printed per call (0: all)")
	f.StringVar(&o.outputDir, "output-dir", "", "when the session succeeds, write its change there: changes.patch, changes.json (status.changes) and artifacts/ (spec.outputs) (implies --wait)")
	o.logs.timestamps = true
	o.logs.sinceSeq = 1
	return cmd
}

// await waits until s ends, printing its events when following, and turns
// its final phase into an exit code.
func (g *globals) await(ctx context.Context, out, errOut io.Writer, c client.Client, s *v1alpha1.AgentSession, o *runOptions) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	var (
		printed  atomic.Uint64
		progress = make(chan struct{}, 1)
		followed = make(chan error, 1)
	)
	followCtx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	if o.follow {
		lo := o.logs
		lo.follow, lo.keepFollowing = true, true
		lo.printed = func(ev loop.Event) {
			printed.Store(ev.Seq)
			select {
			case progress <- struct{}{}:
			default:
			}
		}
		ref := events.SessionRef{Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)}
		go func() {
			err := g.logs(followCtx, out, ref, &lo)
			if err != nil && followCtx.Err() == nil {
				fmt.Fprintf(errOut, "warning: cannot follow the events (the outcome still comes from the status): %v\n", err)
			}
			followed <- err
		}()
	}
	final, err := waitForEnd(ctx, c, client.ObjectKeyFromObject(s), o.pollInterval)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && o.timeout > 0 {
			return &exitError{code: exitTimeout, msg: fmt.Sprintf("agentsession %s: still running after --timeout %s (it keeps running; abort it with kubectl agent abort %s)", s.Name, o.timeout, s.Name)}
		}
		return err
	}
	if o.follow {
		catchUp(ctx, &printed, progress, followed, uint64(max(final.Status.LastEventSequence, 0)))
		stopFollowing()
	}
	return outcome(out, errOut, final, !o.follow)
}

// waitForEnd polls the session until its phase is final or AwaitingInput.
func waitForEnd(ctx context.Context, c client.Client, key client.ObjectKey, every time.Duration) (*v1alpha1.AgentSession, error) {
	s := &v1alpha1.AgentSession{}
	err := wait.PollUntilContextCancel(ctx, every, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, s); err != nil {
			return false, fmt.Errorf("get agentsession %s: %w", key, err)
		}
		return s.Status.Phase.IsFinal() || s.Status.Phase == v1alpha1.PhaseAwaitingInput, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for agentsession %s to end: %w", key, err)
	}
	return s, nil
}

// catchUp waits until the follower printed event seq last, ended, or the
// grace period passed.
func catchUp(ctx context.Context, printed *atomic.Uint64, progress <-chan struct{}, followed <-chan error, last uint64) {
	grace := time.NewTimer(catchUpGrace)
	defer grace.Stop()
	for printed.Load() < last {
		select {
		case <-progress:
		case <-followed:
			return
		case <-grace.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// outcome prints how the session ended and returns nil for Succeeded, else
// an exitError with the code of its phase.
func outcome(out, errOut io.Writer, s *v1alpha1.AgentSession, printResult bool) error {
	st := s.Status
	if printResult && st.Result != "" {
		fmt.Fprintln(out, strings.TrimRight(st.Result, "\n"))
	}
	summary := fmt.Sprintf("agentsession %s: %s after %d turns, %d tool calls, %d tokens", s.Name, st.Phase, st.Turns, st.ToolCalls, st.Usage.Input+st.Usage.Output)
	switch st.Phase {
	case v1alpha1.PhaseSucceeded:
		fmt.Fprintln(errOut, summary)
		return nil
	case v1alpha1.PhaseAborted:
		return &exitError{code: exitAborted, msg: summary}
	case v1alpha1.PhaseAwaitingInput:
		return &exitError{code: exitAwaitingInput, msg: summary + ": the agent awaits input (kubectl agent follow-up " + s.Name + " ...)"}
	default:
		return &exitError{code: exitFailed, msg: summary + ": " + st.Error}
	}
}

// sessionFromFile reads an AgentSession manifest; name overrides its name and
// ns is used when it has no namespace.
func sessionFromFile(path, ns, name string, stdin io.Reader) (*v1alpha1.AgentSession, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("run: read manifest: %w", err)
	}
	s := &v1alpha1.AgentSession{}
	if err := yaml.UnmarshalStrict(b, s); err != nil {
		return nil, fmt.Errorf("run: parse manifest %s: %w", path, err)
	}
	gvk := v1alpha1.GroupVersion.WithKind("AgentSession")
	if (s.APIVersion != "" && s.APIVersion != gvk.GroupVersion().String()) || (s.Kind != "" && s.Kind != gvk.Kind) {
		return nil, fmt.Errorf("run: manifest %s is a %s %s, want %s", path, s.APIVersion, s.Kind, gvk)
	}
	if name != "" {
		s.Name, s.GenerateName = name, ""
	}
	if s.Name == "" && s.GenerateName == "" {
		s.GenerateName = "agent-"
	}
	if s.Namespace == "" {
		s.Namespace = ns
	}
	s.ResourceVersion, s.UID, s.Status = "", "", v1alpha1.AgentSessionStatus{}
	return s, nil
}

// buildSession turns the run flags into an AgentSession.
func buildSession(ns string, o *runOptions) (*v1alpha1.AgentSession, error) {
	if strings.TrimSpace(o.prompt) == "" {
		return nil, fmt.Errorf("run: empty prompt: pass it as an argument, with --prompt or on stdin with -")
	}
	if o.model == "" {
		return nil, fmt.Errorf("run: --model is required")
	}
	var labels map[string]string
	if o.class != "" {
		labels = map[string]string{v1alpha1.LabelClass: o.class}
	}
	s := &v1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.name, Labels: labels},
		Spec: v1alpha1.AgentSessionSpec{
			Prompt:       o.prompt,
			Model:        v1alpha1.ModelSpec{Provider: v1alpha1.Provider(o.provider), Name: o.model, BaseURL: o.baseURL},
			Instructions: o.instructions,
			Limits:       v1alpha1.Limits{MaxTurns: o.maxTurns},
			Workspace:    v1alpha1.WorkspaceSpec{Image: o.image},
		},
	}
	if o.name == "" {
		s.GenerateName = "agent-"
	}
	if o.apiKeySecret != "" {
		name, key, ok := strings.Cut(o.apiKeySecret, "/")
		if !ok || name == "" || key == "" {
			return nil, fmt.Errorf("run: --api-key-secret %q is not NAME/KEY", o.apiKeySecret)
		}
		s.Spec.Model.APIKeySecretRef = &v1alpha1.SecretKeyRef{Name: name, Key: key}
	}
	if o.script != "" {
		name, key, _ := strings.Cut(o.script, "/")
		s.Spec.Model.ScriptConfigMapRef = &v1alpha1.ConfigMapKeyRef{Name: name, Key: key}
	}
	return s, nil
}

// readText returns flag, else the joined args, reading stdin for "-".
func readText(flag string, args []string, stdin io.Reader) (string, error) {
	text := flag
	if text == "" {
		text = strings.Join(args, " ")
	}
	if text == "-" {
		if stdin == nil {
			stdin = os.Stdin
		}
		b, err := io.ReadAll(stdin)
		if err != nil {
			return "", fmt.Errorf("read stdin: %w", err)
		}
		text = string(b)
	}
	return text, nil
}
