package agentsession

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/pricing"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// observation is what one reconcile saw: the inputs of computeStatus.
type observation struct {
	// pod is the workspace pod, nil when there is none.
	pod *corev1.Pod
	// configError says why a Secret or claim the pod would reference may not
	// be used (workspaceRefsProblem): the session fails with ConfigError.
	configError string
	// confineErr is why the live pod's confinement could not be kept (its
	// labels, keepPodLabels; its NetworkPolicy, keepNetworkPolicy); no
	// runner starts on the pod meanwhile.
	confineErr error
	// lost is set when a pod the session was using is gone and cannot be
	// replaced, to the reason: ReasonWorkspaceLost, or ReasonWorkspaceOOMKilled
	// when the kernel killed the workspace container. Empty otherwise.
	lost string
	// lostClaim says how the session's claim went, when it went with the
	// pod (lost is ReasonWorkspaceLost then), or while its pod waited to be
	// scheduled (claimUnderPendingPod).
	lostClaim            string
	claimUnderPendingPod bool
	// memoryLimit is the workspace container's memory limit, for the OOM message.
	memoryLimit string
	// initFailure says which init container failed and how (WorkspaceInitFailed).
	initFailure string
	// recreated is set when a lost pod on a PVC is being replaced.
	recreated bool
	// startRetry says which container the runtime could not start while
	// the pod is replaced for it (retryStart); countStartRetry asks this
	// status to count the replacement in status.workspaceStartRetries.
	startRetry      string
	countStartRetry bool
	// progress is the runner's view, nil when no runner exists.
	progress *runner.Progress
	// suspended is set while spec.suspend holds the runner stopped.
	suspended bool
	// released is set once the pod of a finished session was deleted.
	released bool
	// idle is set when the session is idle (Succeeded or AwaitingInput) with
	// no runner: its phase stays as it is.
	idle bool
	// releasing is set when the pod of an idle session is to be deleted
	// (status says so first; afterStatus deletes it).
	releasing bool
	// eventsPrefix is the first subject token of the events stream.
	eventsPrefix string
	// children are the child sessions listed in status (bounded).
	children []agentsv1.ChildStatus
	// childSummary counts all children; nil without children.
	childSummary *agentsv1.ChildrenSummary
	// queued is set on a session's first reconcile, which writes only its
	// first status (Pending) and leaves everything else to the next one.
	queued bool
	// quotaHeld says why the namespace's session quota holds the session back, or is empty.
	quotaHeld string
}

// QueuedMessage is the Ready condition's message of a session whose first
// reconcile only recorded it (its workspace and quota come next).
const QueuedMessage = "accepted; waiting for its workspace (quota check, pod and network policy come next)"

// computeStatus returns the new status of s from what was observed. It is a
// pure function (now is passed in) so the decisions are table-tested.
func computeStatus(s *agentsv1.AgentSession, obs observation, now metav1.Time) agentsv1.AgentSessionStatus {
	st := *s.Status.DeepCopy()
	gen := s.Generation
	if obs.pod != nil {
		st.PodName = obs.pod.Name
	}
	if obs.eventsPrefix != "" {
		st.EventsSubject = events.SessionFilter(obs.eventsPrefix, events.SessionRef{Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)})
	}
	mirrorProgress(&st, obs.progress)
	st.Children = obs.children
	if len(st.Children) == 0 {
		st.Children = nil
	}
	st.ChildrenSummary = obs.childSummary
	st.TreeTokens = st.Usage.Total
	for _, c := range st.Children {
		st.TreeTokens += c.TreeTokens
	}
	tree := st.Children
	if sum := st.ChildrenSummary; sum != nil && sum.Omitted > 0 {
		st.TreeTokens += sum.OmittedTreeTokens
		tree = append(slices.Clone(tree), agentsv1.ChildStatus{TreeCost: sum.OmittedTreeCost})
	}
	st.TreeCost = treeCost(st.Cost, tree)
	lostMessage := ""
	if c := meta.FindStatusCondition(s.Status.Conditions, agentsv1.ConditionWorkspaceReady); c != nil &&
		(c.Reason == agentsv1.ReasonWorkspaceLost || c.Reason == agentsv1.ReasonWorkspaceOOMKilled || c.Reason == agentsv1.ReasonWorkspaceInitFailed) && s.Status.Phase.IsFinal() {
		obs.lost, lostMessage = c.Reason, c.Message // keep saying why the session failed, in the words it was said
	}

	switch {
	case obs.countStartRetry:
		st.WorkspaceStartRetries++
	case podReady(obs.pod):
		// A pod started: the retries bound failures in a row, not over a
		// session's life (an idle session may get messages for weeks).
		st.WorkspaceStartRetries = 0
	}
	phase, reason, msg := decidePhase(s, obs)
	if phase != "" {
		st.Phase = phase
	}
	if st.Phase == "" {
		st.Phase = agentsv1.PhasePending
	}
	if reason == "" {
		reason = string(st.Phase)
	}
	if st.Phase == agentsv1.PhaseFailed && msg != "" {
		st.Error = truncate(msg, 4096)
	}
	if st.StartTime == nil && (st.Phase == agentsv1.PhaseRunning || st.LastEventSequence > 0) {
		st.StartTime = ptrTime(now)
		if obs.progress != nil && !obs.progress.StartTime.IsZero() {
			st.StartTime = ptrTime(metav1.NewTime(obs.progress.StartTime))
		}
	}
	final := st.Phase.IsFinal()
	switch {
	case final && st.CompletionTime == nil:
		st.CompletionTime = ptrTime(now)
	case !final:
		st.CompletionTime = nil
	}
	switch idle := st.Phase == agentsv1.PhaseSucceeded || st.Phase == agentsv1.PhaseAwaitingInput; {
	case idle && st.IdleSince == nil:
		st.IdleSince = ptrTime(now)
		if p := obs.progress; p != nil && !p.IdleSince.IsZero() {
			// When the input ended, not when this reconcile saw it: the
			// change recorded after the end may be written in the same
			// status write (the end is one write, statuswrites.go).
			st.IdleSince = ptrTime(metav1.NewTime(p.IdleSince))
		}
	case !idle:
		st.IdleSince = nil
	}

	ws := workspaceCondition(obs)
	if lostMessage != "" {
		ws.Message = lostMessage
	}
	if obs.idle && (obs.released || obs.releasing) {
		ws.Status, ws.Reason, ws.Message = metav1.ConditionFalse, agentsv1.ReasonWorkspaceReleased, releasedMessage(s)
	}
	setCondition(&st, agentsv1.ConditionWorkspaceReady, ws, gen)
	ready := metav1.Condition{Type: agentsv1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
	switch {
	case obs.suspended:
		ready.Reason, ready.Message = agentsv1.ReasonSuspended, "spec.suspend is set"
	case st.Phase == agentsv1.PhaseRunning || st.Phase == agentsv1.PhaseAwaitingInput || st.Phase == agentsv1.PhaseSucceeded:
		ready.Status = metav1.ConditionTrue
	}
	setCondition(&st, agentsv1.ConditionReady, ready, gen)
	completed := metav1.Condition{Type: agentsv1.ConditionCompleted, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
	if final {
		completed.Status = metav1.ConditionTrue
	}
	setCondition(&st, agentsv1.ConditionCompleted, completed, gen)
	if meta.FindStatusCondition(st.Conditions, agentsv1.ConditionAccepted) != nil {
		// Another install reported the session unserved before this one,
		// which serves its class, took it up (unserved.go).
		setCondition(&st, agentsv1.ConditionAccepted, metav1.Condition{Type: agentsv1.ConditionAccepted,
			Status: metav1.ConditionTrue, Reason: agentsv1.ReasonClassServed,
			Message: fmt.Sprintf("taken up by the operator install serving class %q", s.Labels[agentsv1.LabelClass])}, gen)
	}
	if p := obs.progress; p != nil {
		j := metav1.Condition{Type: agentsv1.ConditionJournalAvailable, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonJournalConnected}
		if !p.JournalAvailable {
			j.Status, j.Reason, j.Message = metav1.ConditionFalse, agentsv1.ReasonJournalUnavailable, truncate(p.JournalError, 1024)
		}
		setCondition(&st, agentsv1.ConditionJournalAvailable, j, gen)
		if p.ModelUnavailable != "" {
			setCondition(&st, agentsv1.ConditionModelAvailable, metav1.Condition{Type: agentsv1.ConditionModelAvailable,
				Status: metav1.ConditionFalse, Reason: agentsv1.ReasonModelUnavailable,
				Message: truncate("waiting for the model since "+p.ModelUnavailableSince.UTC().Format(time.RFC3339)+": "+p.ModelUnavailable, 1024)}, gen)
		} else if meta.FindStatusCondition(st.Conditions, agentsv1.ConditionModelAvailable) != nil {
			setCondition(&st, agentsv1.ConditionModelAvailable, metav1.Condition{Type: agentsv1.ConditionModelAvailable,
				Status: metav1.ConditionTrue, Reason: agentsv1.ReasonModelResponding}, gen)
		}
		if p.WorkspaceUnavailable != "" {
			setCondition(&st, agentsv1.ConditionWorkspaceAvailable, metav1.Condition{Type: agentsv1.ConditionWorkspaceAvailable,
				Status: metav1.ConditionFalse, Reason: agentsv1.ReasonWorkspaceUnreachable,
				Message: truncate("a tool call waits for the workspace's executor stream since "+
					p.WorkspaceUnavailableSince.UTC().Format(time.RFC3339)+": "+p.WorkspaceUnavailable, 1024)}, gen)
		} else if meta.FindStatusCondition(st.Conditions, agentsv1.ConditionWorkspaceAvailable) != nil {
			setCondition(&st, agentsv1.ConditionWorkspaceAvailable, metav1.Condition{Type: agentsv1.ConditionWorkspaceAvailable,
				Status: metav1.ConditionTrue, Reason: agentsv1.ReasonWorkspaceReachable}, gen)
		}
		if p.HistoryExpired {
			setCondition(&st, agentsv1.ConditionHistoryAvailable, metav1.Condition{Type: agentsv1.ConditionHistoryAvailable,
				Status: metav1.ConditionFalse, Reason: agentsv1.ReasonHistoryExpired,
				Message: "the journal no longer holds this session's events (they are older than the journal's retention, or were lost with the NATS server's store): " +
					"the session keeps its result, but a message cannot resume it; create a new session instead"}, gen)
		}
		mirrorChanges(&st, p, gen)
	}
	return st
}

// mirrorChanges copies the runner's last recording of the session's change
// into status.changes and the ChangesRecorded and ChangesPushed conditions.
// Nothing recorded by this runner leaves what status says.
func mirrorChanges(st *agentsv1.AgentSessionStatus, p *runner.Progress, gen int64) {
	r := p.Changes
	if r == nil {
		return
	}
	if r.Changes != nil {
		c := *r.Changes // the runner's result is never modified once made
		c.Files, c.SkippedArtifacts = slices.Clone(c.Files), slices.Clone(c.SkippedArtifacts)
		st.Changes = &c
	}
	rec := metav1.Condition{Type: agentsv1.ConditionChangesRecorded, Status: metav1.ConditionTrue,
		Reason: r.RecordReason, Message: truncate(r.RecordMessage, 4096)}
	if r.RecordReason != agentsv1.ReasonChangesRecorded {
		rec.Status = metav1.ConditionFalse
	}
	setCondition(st, agentsv1.ConditionChangesRecorded, rec, gen)
	if r.PushReason == "" {
		return
	}
	push := metav1.Condition{Type: agentsv1.ConditionChangesPushed, Status: metav1.ConditionTrue,
		Reason: r.PushReason, Message: truncate(r.PushMessage, 4096)}
	if r.PushReason == agentsv1.ReasonPushFailed {
		push.Status = metav1.ConditionFalse
	}
	setCondition(st, agentsv1.ConditionChangesPushed, push, gen)
}

// releasedMessage says what happened to an idle session's pod and what a
// message will start in.
func releasedMessage(s *agentsv1.AgentSession) string {
	if s.Spec.Workspace.Volume.PersistentVolumeClaim != nil {
		return "the workspace pod was deleted while the session is idle (spec.workspace.retainAfterSuccess); " +
			"a message starts a new pod on the same claim"
	}
	return "the workspace pod was deleted while the session is idle (spec.workspace.retainAfterSuccess) and its " +
		"emptyDir with it; a message starts a new pod with an empty workspace"
}

// decidePhase returns the phase the observation implies, or "" to keep the
// current one. Final phases other than Succeeded never change.
func decidePhase(s *agentsv1.AgentSession, obs observation) (agentsv1.Phase, string, string) {
	cur := s.Status.Phase
	if cur == agentsv1.PhaseFailed || cur == agentsv1.PhaseAborted {
		if c := meta.FindStatusCondition(s.Status.Conditions, agentsv1.ConditionCompleted); c != nil {
			return "", c.Reason, c.Message
		}
		return "", string(cur), s.Status.Error
	}
	p := obs.progress
	switch {
	case obs.configError != "":
		return agentsv1.PhaseFailed, agentsv1.ReasonConfigError, obs.configError
	case obs.lost == agentsv1.ReasonWorkspaceInitFailed:
		return agentsv1.PhaseFailed, agentsv1.ReasonWorkspaceInitFailed, "the workspace pod could not start: " + obs.initFailure
	case obs.lost == agentsv1.ReasonWorkspaceOOMKilled:
		return agentsv1.PhaseFailed, agentsv1.ReasonWorkspaceOOMKilled,
			"the workspace container exceeded its memory limit (" + obs.memoryLimit + ") and was killed with everything " +
				"running in it, its emptyDir with it; raise spec.workspace.resources.limits.memory"
	case obs.lost != "" && obs.claimUnderPendingPod:
		return agentsv1.PhaseFailed, agentsv1.ReasonWorkspaceLost,
			"the workspace pod cannot start because " + obs.lostClaim + " (a pod waits for a deleted claim forever); " +
				"a new pod on a new, empty claim would not have the session's workspace"
	case obs.lost != "" && obs.lostClaim != "":
		return agentsv1.PhaseFailed, agentsv1.ReasonWorkspaceLost,
			"the workspace pod is gone and " + obs.lostClaim + " with the session's work; a new pod on a new, empty claim would not resume it"
	case obs.lost != "":
		return agentsv1.PhaseFailed, agentsv1.ReasonWorkspaceLost,
			"the workspace pod is gone and its emptyDir with it; use a persistentVolumeClaim volume to survive pod loss"
	case p != nil && (p.Phase == agentsv1.PhaseFailed || p.Phase == agentsv1.PhaseAborted):
		return p.Phase, p.Reason, p.Error
	case obs.startRetry != "" && !s.Spec.Abort && !obs.idle:
		return agentsv1.PhaseProvisioning, agentsv1.ReasonWorkspaceStartRetried, startRetryMessage(s, obs)
	case s.Spec.Abort:
		if p == nil || p.Done {
			return agentsv1.PhaseAborted, agentsv1.ReasonAborted, "spec.abort is set"
		}
		return "", "", ""
	case obs.idle:
		return "", "", "" // only a message changes an idle session's phase
	case obs.suspended:
		return "", agentsv1.ReasonSuspended, "spec.suspend is set"
	case p != nil && p.Phase != "":
		return p.Phase, p.Reason, p.Error
	case cur == agentsv1.PhaseSucceeded || cur == agentsv1.PhaseAwaitingInput || cur == agentsv1.PhaseRunning:
		if !podReady(obs.pod) {
			return agentsv1.PhaseProvisioning, agentsv1.ReasonPodNotReady, "waiting for the workspace pod"
		}
		return "", "", ""
	case obs.quotaHeld != "":
		return agentsv1.PhasePending, agentsv1.ReasonQuotaExceeded, obs.quotaHeld
	case obs.queued:
		return agentsv1.PhasePending, agentsv1.ReasonPending, QueuedMessage
	case obs.pod == nil:
		return agentsv1.PhasePending, agentsv1.ReasonPending, ""
	case !podReady(obs.pod):
		return agentsv1.PhaseProvisioning, agentsv1.ReasonPodCreated, "waiting for the workspace pod to become Ready"
	default:
		return agentsv1.PhaseRunning, agentsv1.ReasonRunning, startingMessage
	}
}

// startRetryMessage is the Ready condition's message while a pod the
// runtime could not start is replaced.
func startRetryMessage(s *agentsv1.AgentSession, obs observation) string {
	n := s.Status.WorkspaceStartRetries
	if obs.countStartRetry {
		n++
	}
	return fmt.Sprintf("%s; a new pod replaces it (retry %d of %d)", obs.startRetry, n, MaxWorkspaceStartRetries)
}

// startingMessage is the Ready and Completed conditions' message of a session that has just
// become Running, until its runner reports. Clearing it is no write of its own
// (withoutProgress): the runner's first progress write, or the end, clears it.
const startingMessage = "starting the agent"

func workspaceCondition(obs observation) metav1.Condition {
	c := metav1.Condition{Type: agentsv1.ConditionWorkspaceReady, Status: metav1.ConditionFalse}
	switch {
	case obs.configError != "":
		c.Reason, c.Message = agentsv1.ReasonConfigError, obs.configError
	case obs.lost == agentsv1.ReasonWorkspaceInitFailed:
		c.Reason, c.Message = agentsv1.ReasonWorkspaceInitFailed, obs.initFailure
	case obs.lost == agentsv1.ReasonWorkspaceOOMKilled:
		c.Reason, c.Message = agentsv1.ReasonWorkspaceOOMKilled, "the workspace container was killed for exceeding its memory limit"
	case obs.lost != "" && obs.claimUnderPendingPod:
		c.Reason, c.Message = agentsv1.ReasonWorkspaceLost, "the workspace pod cannot start because "+obs.lostClaim
	case obs.lost != "" && obs.lostClaim != "":
		c.Reason, c.Message = agentsv1.ReasonWorkspaceLost, "the workspace pod is gone and "+obs.lostClaim
	case obs.lost != "":
		c.Reason, c.Message = agentsv1.ReasonWorkspaceLost, "the workspace pod is gone"
	case obs.confineErr != nil:
		c.Reason, c.Message = agentsv1.ReasonConfinementNotKept, truncate("the workspace pod's NetworkPolicy or labels "+
			"are not in place, so no input starts in it until they are written again: "+obs.confineErr.Error(), 1024)
	case obs.released:
		c.Reason, c.Message = agentsv1.ReasonWorkspaceReleased, "the workspace pod was deleted"
	case obs.startRetry != "":
		c.Reason, c.Message = agentsv1.ReasonWorkspaceStartRetried, obs.startRetry+"; a new pod replaces it"
	case obs.recreated:
		c.Reason, c.Message = agentsv1.ReasonWorkspaceRecreated, "the workspace pod was lost; a new one uses the same claim"
	case obs.pod == nil:
		c.Reason = agentsv1.ReasonPending
	case podReady(obs.pod):
		c.Status, c.Reason = metav1.ConditionTrue, agentsv1.ReasonPodReady
	default:
		c.Reason, c.Message = agentsv1.ReasonPodNotReady, "pod phase "+string(obs.pod.Status.Phase)
	}
	return c
}

// treeCost is own plus the children's treeCost; empty when none of them
// is priced.
func treeCost(own string, children []agentsv1.ChildStatus) string {
	sum, priced := pricing.Amount(0), false
	add := func(c string) {
		if a, err := pricing.ParseAmount(c); c != "" && err == nil {
			sum, priced = sum+a, true
		}
	}
	add(own)
	for _, c := range children {
		add(c.TreeCost)
	}
	if !priced {
		return ""
	}
	return sum.String()
}

// mirrorProgress copies the runner's counters into status.
func mirrorProgress(st *agentsv1.AgentSessionStatus, p *runner.Progress) {
	if p != nil && p.Owner != "" {
		st.Owner = p.Owner
	}
	if p == nil || !p.Restored {
		return // nothing read from the journal yet: status's counters stand
	}
	st.Turns = int32(p.Turns)
	st.ToolCalls = int32(p.ToolCalls)
	st.Usage = agentsv1.Usage{
		Input: p.Usage.InputTokens, Output: p.Usage.OutputTokens, Reasoning: p.Usage.ReasoningTokens,
		CacheRead: p.Usage.CacheReadTokens, CacheWrite: p.Usage.CacheWriteTokens, Total: p.Usage.Total(),
	}
	if p.Currency != "" {
		st.Cost, st.Currency = p.Cost.String(), p.Currency
	}
	if p.Result != "" {
		st.Result, st.ResultTruncated = p.Result, p.ResultTruncated
	}
	if p.LastSeq > 0 {
		st.LastEventSequence = int64(p.LastSeq)
	}
	if p.Restored {
		// What the journal holds: a name status recorded too early (the
		// manager stopped before the journal had the input) is taken back.
		st.MessagesDelivered = slices.Clone(p.Delivered)
	}
	if p.Restored && (p.InputSince.IsZero() || st.WorkingTime == nil) {
		st.WorkingTime = &metav1.Duration{Duration: p.Worked.Round(time.Second)}
	}
	if !p.StartTime.IsZero() && st.StartTime == nil {
		st.StartTime = ptrTime(metav1.NewTime(p.StartTime))
	}
	if p.Context.Window > 0 || p.Context.RequestTokens > 0 || p.Compactions > 0 {
		st.Context = &agentsv1.ContextStatus{Window: int64(p.Context.Window),
			LastRequestTokens: p.Context.RequestTokens, Compactions: p.Compactions}
	}
	if p.MCPServers != nil {
		st.MCPServers = slices.Clone(p.MCPServers)
	}
	if p.Plan != nil {
		st.Plan = slices.Clone(p.Plan)
	}
}

func setCondition(st *agentsv1.AgentSessionStatus, _ string, c metav1.Condition, gen int64) {
	c.ObservedGeneration = gen
	meta.SetStatusCondition(&st.Conditions, c)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }
