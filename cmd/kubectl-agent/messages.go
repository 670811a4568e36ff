package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
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
			return fmt.Errorf("session is %s", s.Status.Phase)
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
			s := &v1alpha1.AgentSession{}
			s.Namespace, s.Name = ns, args[0]
			patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"abort":true}}`))
			if err := c.Patch(cmd.Context(), s, patch); err != nil {
				return fmt.Errorf("abort agentsession %s/%s: %w", ns, args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "agentsession %s aborted\n", args[0])
			return nil
		},
	}
}
