package changes_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
)

// The packs and patches of all sessions share one bound in the manager:
// a recording whose bytes would pass it waits until another recording
// releases its own, then records and pushes as usual, and one that cannot
// wait any longer fails with a message saying why (the change stays
// committed in the workspace). Without the bound, sessions ending at once
// each held up to 256 MiB of pack and 256 MiB of patch.
func TestRecordingsShareTheManagersBytesInFlight(t *testing.T) {
	f := newFixture(t)
	f.rec.MaxBytesInFlight = 64 << 10
	s := f.session("s", pushSpec("push"))
	if err := f.rec.Baseline(t.Context(), f.env, s); err != nil {
		t.Fatal(err)
	}
	f.edit(t)
	f.writeRandom(t, "big.bin", 16<<10)

	release := changes.HoldBytes(t, f.rec, 64<<10) // another session's recording holds it all
	done := make(chan *changes.Result, 1)
	go func() { done <- f.rec.Record(t.Context(), f.env, s, s.Spec.Prompt) }()
	waitFor(t, "the recording waits for the bytes another holds", func() error {
		if n := changes.WaitingForBytes(f.rec); n != 1 {
			return fmt.Errorf("%d reads waiting", n)
		}
		return nil
	})
	select {
	case res := <-done:
		t.Fatalf("the recording ended (%s: %s) while the budget was held", res.RecordReason, res.RecordMessage)
	default:
	}
	release()
	res := <-done
	if res.RecordReason != agentsv1.ReasonChangesRecorded || res.PushReason != agentsv1.ReasonPushed {
		t.Fatalf("after the release: record %s (%s), push %s (%s); want recorded and pushed",
			res.RecordReason, res.RecordMessage, res.PushReason, res.PushMessage)
	}
	checkAgainstGit(t, f.workspace, res.Changes, f.read(t, s, changes.PatchObject))

	// A recording that cannot wait (its context ends) says why.
	f.writeRandom(t, "big2.bin", 16<<10)
	release = changes.HoldBytes(t, f.rec, 64<<10)
	defer release()
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for changes.WaitingForBytes(f.rec) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	res = f.rec.Record(ctx, f.env, s, s.Spec.Prompt)
	if res.RecordReason != agentsv1.ReasonRecordFailed || !containsAll(res.RecordMessage, "memory for changes", "in use by other sessions") {
		t.Fatalf("record %s (%s), want RecordFailed saying it waited for the manager's memory", res.RecordReason, res.RecordMessage)
	}
}

// waitFor polls cond until it returns nil, failing t after 30 s.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
