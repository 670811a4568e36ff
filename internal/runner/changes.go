package runner

import (
	"context"
	"encoding/json"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// ChangesRecorder records a session's change (*changes.Recorder
// implements it): a baseline when the session starts, and the change each
// time an input ends Succeeded, before the runner parks and the workspace
// pod can be released.
type ChangesRecorder interface {
	Baseline(ctx context.Context, env tool.ExecutionEnvironment, s *agentsv1.AgentSession) error
	Record(ctx context.Context, env tool.ExecutionEnvironment, s *agentsv1.AgentSession, input string) *changes.Result
}

// changesBaseline records the baseline of the session's change, beside the
// first turn's start (its prompt context and model call), and closes
// s.baselined: every tool call waits for that (loop.WithToolGate), so the
// baseline still sees the workspace before any tool changed it. A failure
// (e.g. no git in the workspace image) is logged; recording later says so.
func (s *session) changesBaseline() {
	defer close(s.baselined)
	rec := s.r.opts.Changes
	if rec == nil || s.env == nil || !changes.Enabled(s.obj) {
		return
	}
	if err := rec.Baseline(s.ctx, s.env, s.obj); err != nil && s.ctx.Err() == nil {
		s.log.Info("Could not record the baseline of the session's change", "reason", err.Error())
	}
}

// recordChanges records the change after an input ended Succeeded, puts it
// in progress and journals CHANGES_RECORDED. It never fails the session.
func (s *session) recordChanges(sess *loop.Session) {
	rec := s.r.opts.Changes
	if rec == nil || s.env == nil || !changes.Enabled(s.obj) || sess.State() != loop.StateIdle {
		return
	}
	select { // an input without tool calls can end before the baseline
	case <-s.baselined:
	case <-s.ctx.Done():
		return
	}
	res := rec.Record(s.ctx, s.env, s.obj, s.obj.Spec.Prompt)
	if s.ctx.Err() != nil {
		return // stopped meanwhile: the stop's mode says what happens
	}
	s.mu.Lock()
	s.prog.Changes = res
	s.mu.Unlock()
	data := loop.EventData{Message: res.Summary()}
	data.Changes, _ = json.Marshal(changesEvent(res))
	if err := sess.EmitHostEvent(s.ctx, loop.EventChangesRecorded, data); err != nil {
		s.log.Info("Could not journal CHANGES_RECORDED", "reason", err.Error())
	}
	s.notify(true)
}

// changesEventData is the summary CHANGES_RECORDED carries: no file list,
// no contents.
type changesEventData struct {
	Base             string `json:"base,omitempty"`
	Head             string `json:"head,omitempty"`
	Branch           string `json:"branch,omitempty"`
	Pushed           bool   `json:"pushed"`
	FilesChanged     int64  `json:"filesChanged"`
	Insertions       int64  `json:"insertions"`
	Deletions        int64  `json:"deletions"`
	PatchBytes       int64  `json:"patchBytes"`
	Artifacts        int32  `json:"artifacts"`
	SkippedArtifacts int    `json:"skippedArtifacts,omitempty"`
	Recorded         string `json:"recorded"`
	Push             string `json:"push,omitempty"`
	Message          string `json:"message,omitempty"`
}

func changesEvent(res *changes.Result) changesEventData {
	d := changesEventData{Recorded: res.RecordReason, Push: res.PushReason}
	if res.RecordReason == agentsv1.ReasonRecordFailed {
		d.Message = res.RecordMessage
	} else if res.PushReason == agentsv1.ReasonPushFailed {
		d.Message = res.PushMessage
	}
	if c := res.Changes; c != nil {
		d.Base, d.Head, d.Branch, d.Pushed = c.Base, c.Head, c.Branch, c.Pushed
		d.FilesChanged, d.Insertions, d.Deletions = c.FilesChanged, c.Insertions, c.Deletions
		d.PatchBytes, d.Artifacts, d.SkippedArtifacts = c.PatchBytes, c.Artifacts, len(c.SkippedArtifacts)
	}
	return d
}
