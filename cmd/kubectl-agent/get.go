package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
)

func newGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get [NAME]",
		Short: "List sessions, or describe one",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				var s v1alpha1.AgentSession
				if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, &s); err != nil {
					return fmt.Errorf("get agentsession %s/%s: %w", ns, args[0], err)
				}
				return describe(cmd.OutOrStdout(), &s)
			}
			var list v1alpha1.AgentSessionList
			if err := c.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
				return fmt.Errorf("list agentsessions in %s: %w", ns, err)
			}
			return table(cmd.OutOrStdout(), list.Items, time.Now())
		},
	}
}

// table prints one line per session.
func table(w io.Writer, items []v1alpha1.AgentSession, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPHASE\tMODEL\tPARENT\tTURNS\tTOKENS\tAGE")
	for _, s := range items {
		parent := ""
		if s.Spec.ParentRef != nil {
			parent = s.Spec.ParentRef.Name
		}
		age := duration.HumanDuration(now.Sub(s.CreationTimestamp.Time))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.Name, s.Status.Phase, s.Spec.Model.Name, parent, s.Status.Turns, s.Status.Usage.Total, age)
	}
	return tw.Flush()
}

// describe prints the status of one session.
func describe(w io.Writer, s *v1alpha1.AgentSession) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Name:\t%s/%s\n", s.Namespace, s.Name)
	fmt.Fprintf(tw, "Phase:\t%s\n", s.Status.Phase)
	fmt.Fprintf(tw, "Model:\t%s %s\n", s.Spec.Model.Provider, s.Spec.Model.Name)
	fmt.Fprintf(tw, "Turns:\t%d (tool calls %d)\n", s.Status.Turns, s.Status.ToolCalls)
	fmt.Fprintf(tw, "Tokens:\t%d in, %d out\n", s.Status.Usage.Input, s.Status.Usage.Output)
	if s.Status.PodName != "" {
		fmt.Fprintf(tw, "Pod:\t%s\n", s.Status.PodName)
	}
	if s.Status.EventsSubject != "" {
		fmt.Fprintf(tw, "Events:\t%s (last seq %d)\n", s.Status.EventsSubject, s.Status.LastEventSequence)
	}
	for _, c := range s.Status.Conditions {
		fmt.Fprintf(tw, "Condition %s:\t%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, ch := range s.Status.Children {
		fmt.Fprintf(tw, "Child:\t%s %s\n", ch.Name, ch.Phase)
	}
	if s.Status.Error != "" {
		fmt.Fprintf(tw, "Error:\t%s\n", s.Status.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Status.Result != "" {
		cut := ""
		if s.Status.ResultTruncated {
			cut = " (truncated; the full text is in kubectl agent logs)"
		}
		fmt.Fprintf(w, "Result%s:\n%s\n", cut, s.Status.Result)
	}
	return nil
}
