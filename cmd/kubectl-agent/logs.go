package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

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
}

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
	nc, closeNATS, err := g.nats(ctx)
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
		evs, err := events.Replay(ctx, js, ref, events.WithStreamConfig(g.stream))
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if ev.Seq < o.sinceSeq {
				continue
			}
			if err := print(ev); err != nil {
				return err
			}
		}
		return nil
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

// eventPrinter returns the function printing one event for o.
func eventPrinter(w io.Writer, o *logsOptions) func(loop.Event) error {
	if o.raw {
		enc := json.NewEncoder(w)
		return func(ev loop.Event) error { return enc.Encode(ev) }
	}
	r := render.New(w, render.Options{Deltas: o.follow, MaxOutputLines: o.maxOutputLines, Timestamps: o.timestamps})
	return r.Event
}
