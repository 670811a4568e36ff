package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
)

func newMessageCmd(g *globals, kind v1alpha1.MessageKind) *cobra.Command {
	use, short := "steer NAME TEXT... | -", "Steer a running session: the text is injected after the current tool round"
	if kind == v1alpha1.MessageFollowUp {
		use, short = "follow-up NAME TEXT... | -", "Give a session more work: the text becomes its next input"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := readText("", args[1:], cmd.InOrStdin())
			if err != nil {
				return err
			}
			if strings.TrimSpace(text) == "" {
				return fmt.Errorf("%s: empty text", kind)
			}
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			name, err := appendMessage(cmd.Context(), c, client.ObjectKey{Namespace: ns, Name: args[0]}, kind, text)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "message %s appended to agentsession %s\n", name, args[0])
			return nil
		},
	}
}

// appendMessage appends a message to spec.messages, retrying on conflicts,
// and returns its name.
func appendMessage(ctx context.Context, c client.Client, key client.ObjectKey, kind v1alpha1.MessageKind, text string) (string, error) {
	var name string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s v1alpha1.AgentSession
		if err := c.Get(ctx, key, &s); err != nil {
			return err
		}
		if s.Status.Phase.IsFinal() {
			return finalPhaseError{s.Status.Phase}
		}
		name = nextMessageName(s.Spec.Messages, kind)
		s.Spec.Messages = append(s.Spec.Messages, v1alpha1.Message{Name: name, Kind: kind, Text: text})
		return c.Update(ctx, &s)
	})
	if err != nil {
		return "", fmt.Errorf("append %s message to agentsession %s: %w", kind, key, err)
	}
	return name, nil
}

// finalPhaseError: a session in a final phase takes no message.
type finalPhaseError struct{ phase v1alpha1.Phase }

func (e finalPhaseError) Error() string { return "session is " + string(e.phase) }

// nextMessageName returns "<kind>-<n>" with the smallest n above every
// existing message count that is not taken.
func nextMessageName(msgs []v1alpha1.Message, kind v1alpha1.MessageKind) string {
	prefix := "steer"
	if kind == v1alpha1.MessageFollowUp {
		prefix = "follow-up"
	}
	taken := map[string]bool{}
	for _, m := range msgs {
		taken[m.Name] = true
	}
	for n := len(msgs) + 1; ; n++ {
		if name := fmt.Sprintf("%s-%d", prefix, n); !taken[name] {
			return name
		}
	}
}

func newAbortCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "abort NAME",
		Short: "Abort a session as soon as possible (it ends in phase Aborted)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			if err := abortSession(cmd.Context(), c, client.ObjectKey{Namespace: ns, Name: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "agentsession %s aborted\n", args[0])
			return nil
		},
	}
}

func newSuspendCmd(g *globals, suspend bool) *cobra.Command {
	use, short, done := "suspend NAME", "Suspend a session after its current tool round; its workspace pod is kept", "suspended"
	if !suspend {
		use, short, done = "resume NAME", "Resume a suspended session from its journal", "resumed"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			if err := suspendSession(cmd.Context(), c, client.ObjectKey{Namespace: ns, Name: args[0]}, suspend); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "agentsession %s %s\n", args[0], done)
			return nil
		},
	}
}

// abortSession sets spec.abort of the AgentSession key.
func abortSession(ctx context.Context, c client.Client, key client.ObjectKey) error {
	return patchSpec(ctx, c, key, "abort", `{"spec":{"abort":true}}`)
}

// suspendSession sets spec.suspend of the AgentSession key.
func suspendSession(ctx context.Context, c client.Client, key client.ObjectKey, suspend bool) error {
	what := "suspend"
	if !suspend {
		what = "resume"
	}
	return patchSpec(ctx, c, key, what, fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend))
}

// patchSpec merge-patches the AgentSession key with patch; what names the
// action in the error.
func patchSpec(ctx context.Context, c client.Client, key client.ObjectKey, what, patch string) error {
	s := &v1alpha1.AgentSession{}
	s.Namespace, s.Name = key.Namespace, key.Name
	if err := c.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("%s agentsession %s: %w", what, key, err)
	}
	return nil
}
