package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
)

type runOptions struct {
	name, prompt, provider, model, apiKeySecret, baseURL, script, image, instructions string
	maxTurns                                                                          int32
	follow                                                                            bool
	logs                                                                              logsOptions
}

func newRunCmd(g *globals) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [PROMPT | -]",
		Short: "Create an AgentSession (reading the prompt from the argument, --prompt or stdin with -)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prompt, err := readText(o.prompt, args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			o.prompt = prompt
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			s, err := buildSession(ns, o)
			if err != nil {
				return err
			}
			if err := c.Create(cmd.Context(), s); err != nil {
				return fmt.Errorf("create agentsession: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "agentsession.agent-operator.dev/%s created\n", s.Name)
			if !o.follow {
				fmt.Fprintln(cmd.OutOrStdout(), s.Name)
				return nil
			}
			o.logs.follow = true
			ref := events.SessionRef{Namespace: ns, Name: s.Name, UID: string(s.UID)}
			return g.logs(cmd.Context(), cmd.OutOrStdout(), ref, &o.logs)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.name, "name", "", "session name (default: generated agent-xxxxx)")
	f.StringVar(&o.prompt, "prompt", "", "the task")
	f.StringVar(&o.provider, "provider", string(v1alpha1.ProviderAnthropic), "anthropic, openai, openai-compatible, gemini or scripted")
	f.StringVar(&o.model, "model", "", "model name (required)")
	f.StringVar(&o.apiKeySecret, "api-key-secret", "", "Secret holding the API key, as NAME/KEY")
	f.StringVar(&o.baseURL, "base-url", "", "API endpoint (required for openai-compatible)")
	f.StringVar(&o.script, "script-configmap", "", "ConfigMap of the scripted provider, as NAME or NAME/KEY")
	f.StringVar(&o.image, "image", "", "workspace image")
	f.StringVar(&o.instructions, "instructions", "", "extra system prompt instructions")
	f.Int32Var(&o.maxTurns, "max-turns", 0, "turn limit (0: unlimited)")
	f.BoolVarP(&o.follow, "follow", "f", false, "follow the session's events until it ends")
	f.IntVar(&o.logs.maxOutputLines, "max-output-lines", 40, "with -f, tool output lines printed per call (0: all)")
	o.logs.timestamps = true
	o.logs.sinceSeq = 1
	return cmd
}

// buildSession turns the run flags into an AgentSession.
func buildSession(ns string, o *runOptions) (*v1alpha1.AgentSession, error) {
	if strings.TrimSpace(o.prompt) == "" {
		return nil, fmt.Errorf("run: empty prompt: pass it as an argument, with --prompt or on stdin with -")
	}
	if o.model == "" {
		return nil, fmt.Errorf("run: --model is required")
	}
	s := &v1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.name},
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
