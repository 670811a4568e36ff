package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/events"
)

// recordedTimeout bounds the wait for the change of a session that just
// went idle to be recorded.
const recordedTimeout = 5 * time.Minute

// writeOutputs waits until the change of s's last input is recorded and
// writes changes.patch, changes.json and artifacts/ into dir.
func (g *globals) writeOutputs(ctx context.Context, c client.Client, s *v1alpha1.AgentSession, dir string, every time.Duration) error {
	final, err := waitForRecorded(ctx, c, client.ObjectKeyFromObject(s), every)
	if err != nil {
		return err
	}
	if cond := meta.FindStatusCondition(final.Status.Conditions, v1alpha1.ConditionChangesRecorded); cond != nil &&
		cond.Reason == v1alpha1.ReasonRecordFailed {
		return fmt.Errorf("agentsession %s: its change could not be recorded: %s", s.Name, cond.Message)
	}
	js, closeNATS, err := g.jetStream(ctx, s.Namespace)
	if err != nil {
		return err
	}
	defer closeNATS()
	ref := events.SessionRef{Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)}
	return saveOutputs(ctx, js, ref, dir)
}

// waitForRecorded polls s until status.changes was recorded after the
// session last became idle (or ChangesRecorded says it failed then).
func waitForRecorded(ctx context.Context, c client.Client, key client.ObjectKey, every time.Duration) (*v1alpha1.AgentSession, error) {
	ctx, cancel := context.WithTimeout(ctx, recordedTimeout)
	defer cancel()
	s := &v1alpha1.AgentSession{}
	err := wait.PollUntilContextCancel(ctx, every, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, s); err != nil {
			return false, fmt.Errorf("get agentsession %s: %w", key, err)
		}
		idle := s.Status.IdleSince
		if idle == nil {
			return false, nil
		}
		if ch := s.Status.Changes; ch != nil && ch.RecordedTime != nil && !ch.RecordedTime.Before(idle) {
			return true, nil
		}
		cond := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionChangesRecorded)
		return cond != nil && cond.Reason == v1alpha1.ReasonRecordFailed && !cond.LastTransitionTime.Before(idle), nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for the change of agentsession %s to be recorded: %w", key, err)
	}
	return s, nil
}

// saveOutputs writes the stored change of ref into dir.
func saveOutputs(ctx context.Context, js jetstream.JetStream, ref events.SessionRef, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output dir: %w", err)
	}
	for _, name := range []string{changes.PatchObject, changes.SummaryObject} {
		data, err := readChanges(ctx, js, ref, name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("output dir: %w", err)
		}
	}
	list, err := events.ReadChanges(ctx, js, ref, changes.ArtifactsObject)
	if errors.Is(err, events.ErrNoChanges) {
		return nil // no spec.outputs
	}
	if err != nil {
		return err
	}
	var paths []string
	if err := json.Unmarshal(list, &paths); err != nil {
		return fmt.Errorf("read the artifact list of %s: %w", ref, err)
	}
	for _, p := range paths {
		if _, clean, err := parseCpSource(ref.Name + ":" + p); err != nil || clean != p || strings.Contains(p, "\\") {
			return fmt.Errorf("artifact list of %s: refusing path %q", ref, p)
		}
		dest := filepath.Join(dir, "artifacts", filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return fmt.Errorf("output dir: %w", err)
		}
		if err := copyArtifact(ctx, js, ref, p, dest, nil); err != nil {
			return err
		}
	}
	return nil
}
