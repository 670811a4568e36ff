package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/render"
	"github.com/agent-operator/agent-operator/internal/loop"
)

type logsOptions struct {
	follow         bool
	keepFollowing  bool
	sinceSeq       uint64
	raw            bool
	maxOutputLines int
	timestamps     bool
	// printed, when set, is called after each printed event (run uses it
	// to know when the follower has caught up with the final status).
	printed func(loop.Event)
	// children, when set, lists a session's child sessions: a replay
	// (without -f or --raw) prints each child's events indented under the
	// parent's spawn_agent call that created it.
	children func(ctx context.Context, parent events.SessionRef) ([]events.SessionRef, error)
	indent   string
}

// maxSubagentIndent bounds the nesting a replay prints (maxDepth is at most 5).
const maxSubagentIndent = 6

func newLogsCmd(g *globals) *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print the events of a session from its journal, optionally following it live",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			ref, err := sessionRef(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			o.children = func(ctx context.Context, parent events.SessionRef) ([]events.SessionRef, error) {
				return childRefs(ctx, c, parent)
			}
			return g.logs(cmd.Context(), cmd.OutOrStdout(), ref, o)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.follow, "follow", "f", false, "keep printing new events")
	f.BoolVar(&o.keepFollowing, "keep-following", false, "with -f, do not stop at SESSION_END")
	f.Uint64Var(&o.sinceSeq, "since-seq", 1, "first event seq to print")
	f.BoolVar(&o.raw, "raw", false, "print one JSON event per line")
	f.IntVar(&o.maxOutputLines, "max-output-lines", 40, "tool output lines printed per call (0: all)")
	f.BoolVar(&o.timestamps, "timestamps", true, "prefix events with their time")
	return cmd
}

// sessionRef reads the session's uid; a deleted session is still readable
// from the journal (its newest incarnation).
func sessionRef(ctx context.Context, c client.Client, ns, name string) (events.SessionRef, error) {
	ref := events.SessionRef{Namespace: ns, Name: name}
	var s v1alpha1.AgentSession
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)
	switch {
	case err == nil:
		ref.UID = string(s.UID)
	case apierrors.IsNotFound(err):
	default:
		return ref, fmt.Errorf("get agentsession %s/%s: %w", ns, name, err)
	}
	return ref, nil
}

func (g *globals) logs(ctx context.Context, w io.Writer, ref events.SessionRef, o *logsOptions) error {
	nc, closeNATS, err := g.nats(ctx, ref.Namespace)
	if err != nil {
		return err
	}
	defer closeNATS()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("open jetstream: %w", err)
	}
	printEvent := eventPrinter(w, o)
	print := func(ev loop.Event) error {
		if err := printEvent(ev); err != nil {
			return err
		}
		if o.printed != nil {
			o.printed(ev)
		}
		return nil
	}
	if !o.follow {
		return g.replayTree(ctx, js, w, ref, o, print)
	}
	err = events.Follow(ctx, js, ref, o.sinceSeq, func(ev loop.Event) error {
		if err := print(ev); err != nil {
			return err
		}
		if ev.Kind == loop.EventSessionEnd && !o.keepFollowing {
			return events.ErrStop
		}
		return nil
	}, events.WithStreamConfig(g.stream))
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// replayTree prints the journal of ref and, when o.children is set (and the
// output is for people), each child's journal indented right after the
// spawn_agent call that created it.
func (g *globals) replayTree(ctx context.Context, js jetstream.JetStream, w io.Writer, ref events.SessionRef,
	o *logsOptions, print func(loop.Event) error) error {
	evs, err := events.Replay(ctx, js, ref, events.WithStreamConfig(g.stream))
	if err != nil {
		return err
	}
	var children []events.SessionRef
	if o.children != nil && !o.raw && len(o.indent) < 2*maxSubagentIndent {
		if children, err = o.children(ctx, ref); err != nil {
			return err
		}
	}
	for _, ev := range evs {
		if ev.Seq < o.sinceSeq {
			continue
		}
		if err := print(ev); err != nil {
			return err
		}
		if ev.Kind != loop.EventToolCallEnd || ev.Data.ToolName != "spawn_agent" || ev.Data.IsError {
			continue
		}
		for _, child := range children {
			if !strings.Contains(ev.Data.Output, child.Name) {
				continue
			}
			co := *o
			co.indent, co.sinceSeq, co.printed = o.indent+"  ", 1, nil
			if err := g.replayTree(ctx, js, w, child, &co, eventPrinter(w, &co)); err != nil {
				return fmt.Errorf("replay subagent %s: %w", child.Name, err)
			}
			break
		}
	}
	return nil
}

// childRefs lists the child sessions of parent (by its uid label), longest
// names first so that "lead-sub-10" is matched before "lead-sub-1".
func childRefs(ctx context.Context, c client.Client, parent events.SessionRef) ([]events.SessionRef, error) {
	if parent.UID == "" {
		return nil, nil
	}
	var list v1alpha1.AgentSessionList
	if err := c.List(ctx, &list, client.InNamespace(parent.Namespace),
		client.MatchingLabels{v1alpha1.LabelParentUID: parent.UID}); err != nil {
		return nil, fmt.Errorf("list subagents of %s: %w", parent.Name, err)
	}
	refs := make([]events.SessionRef, 0, len(list.Items))
	for _, s := range list.Items {
		refs = append(refs, events.SessionRef{Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)})
	}
	slices.SortFunc(refs, func(a, b events.SessionRef) int { return len(b.Name) - len(a.Name) })
	return refs, nil
}

// eventPrinter returns the function printing one event for o.
func eventPrinter(w io.Writer, o *logsOptions) func(loop.Event) error {
	if o.raw {
		// JSON escapes the C0 controls; the JSON writer escapes DEL, C1
		// and bidi controls too, leaving the values as they are.
		enc := json.NewEncoder(render.NewJSONWriter(w))
		return func(ev loop.Event) error { return enc.Encode(ev) }
	}
	r := render.New(w, render.Options{Deltas: o.follow, MaxOutputLines: o.maxOutputLines, Timestamps: o.timestamps, Indent: o.indent})
	return r.Event
}
