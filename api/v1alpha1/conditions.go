package v1alpha1

// Condition types of an AgentSession. All are positive: True is the good state.
const (
	// ConditionReady is True while the agent is running or waiting for input without problems,
	// and after it succeeded.
	ConditionReady = "Ready"
	// ConditionWorkspaceReady is True when the workspace pod is Ready to execute tools.
	ConditionWorkspaceReady = "WorkspaceReady"
	// ConditionCompleted is True when the session reached a final phase; the reason says how.
	ConditionCompleted = "Completed"
	// ConditionJournalAvailable is True when the event journal (NATS JetStream) accepts events.
	ConditionJournalAvailable = "JournalAvailable"
	// ConditionModelAvailable is False while the model provider keeps failing with transient
	// errors and the session waits for it (spec.limits.modelOutageTolerance).
	ConditionModelAvailable = "ModelAvailable"
	// ConditionWorkspaceAvailable is False while a tool call waits for the workspace's executor
	// stream because the Kubernetes API server, or the way through it to the pod, is unavailable
	// (each call waits up to an hour, within the session's deadline), and True once the stream
	// opened again. It is set only on sessions that waited.
	ConditionWorkspaceAvailable = "WorkspaceAvailable"
	// ConditionHistoryAvailable is False when the session's journal is gone (older than the
	// journal's retention): the session keeps its final phase, and a message cannot resume it.
	ConditionHistoryAvailable = "HistoryAvailable"
	// ConditionAccepted is False while no operator install has taken the session up because
	// none serves its class (agent-operator.dev/class) in its namespace (ReasonClassNotServed),
	// and True once the install serving the class took it up (ReasonClassServed). It is set only
	// on sessions that were reported unserved.
	ConditionAccepted = "Accepted"
)

// Condition reasons.
const (
	// ReasonModelUnavailable: the model provider keeps failing with transient errors; the
	// session waits and retries, and fails with this reason after modelOutageTolerance.
	ReasonModelUnavailable = "ModelUnavailable"
	// ReasonModelResponding: the last model call succeeded.
	ReasonModelResponding = "Responding"
	// ReasonWorkspaceUnreachable: a tool call waits for the workspace's executor stream, which
	// cannot be opened for now; the message has the last error and since when.
	ReasonWorkspaceUnreachable = "WorkspaceUnreachable"
	// ReasonWorkspaceReachable: the workspace's executor stream opened after a wait.
	ReasonWorkspaceReachable = "Reachable"
	// ReasonHistoryExpired: the journal no longer holds the session's events.
	ReasonHistoryExpired = "HistoryExpired"
	// ReasonClassNotServed: no operator install has taken the session up within the reporting
	// install's --report-unserved-after of its creation: none serves its class in its namespace.
	ReasonClassNotServed = "ClassNotServed"
	// ReasonClassServed: the install serving the session's class took it up (after it was
	// reported ClassNotServed).
	ReasonClassServed = "ClassServed"
	// ReasonPending: nothing has been done yet.
	ReasonPending = "Pending"
	// ReasonPodCreated: the workspace pod was created and is not Ready yet.
	ReasonPodCreated = "PodCreated"
	// ReasonPodReady: the workspace pod is Ready.
	ReasonPodReady = "PodReady"
	// ReasonPodNotReady: the workspace pod exists but is not Ready.
	ReasonPodNotReady = "PodNotReady"
	// ReasonWorkspaceLost: the workspace pod disappeared or failed and its emptyDir is gone.
	ReasonWorkspaceLost = "WorkspaceLost"
	// ReasonWorkspaceOOMKilled: the workspace container was killed for exceeding its memory
	// limit (on cgroup v2 nodes the kernel kills the whole container), and the emptyDir with it.
	ReasonWorkspaceOOMKilled = "WorkspaceOOMKilled"
	// ReasonWorkspaceInitFailed: an init container of the workspace pod (the executor copy or
	// the git clone of spec.workspace.git) failed, so the pod never started; the message has
	// its exit code and the end of its log.
	ReasonWorkspaceInitFailed = "WorkspaceInitFailed"
	// ReasonWorkspaceRecreated: the pod was lost; its PVC is kept and a new pod was created.
	ReasonWorkspaceRecreated = "WorkspaceRecreated"
	// ReasonWorkspaceStartRetried: the container runtime could not start a container of the
	// workspace pod (StartError: the runtime's fault, not the workspace's), so the pod was
	// replaced; status.workspaceStartRetries counts these, at most 3 per session.
	ReasonWorkspaceStartRetried = "WorkspaceStartRetried"
	// ReasonConfinementNotKept: the workspace pod's NetworkPolicy or the labels it selects the
	// pod by were removed or changed and could not be written again (the API server refused or
	// did not answer; for a child in its parent's workspace: the parent has not yet written
	// them again); no input starts in the pod until they are. Tried again every 10 s.
	ReasonConfinementNotKept = "ConfinementNotKept"
	// ReasonWorkspaceReleased: the session finished and its pod was deleted.
	ReasonWorkspaceReleased = "WorkspaceReleased"
	// ReasonRunning: the agent loop is processing input.
	ReasonRunning = "Running"
	// ReasonAwaitingInput: the agent finished its input and waits for a follow-up message.
	ReasonAwaitingInput = "AwaitingInput"
	// ReasonSuspended: spec.suspend is set.
	ReasonSuspended = "Suspended"
	// ReasonSucceeded: the agent finished its work.
	ReasonSucceeded = "Succeeded"
	// ReasonFailed: the agent loop stopped on an error.
	ReasonFailed = "Failed"
	// ReasonAborted: spec.abort was set.
	ReasonAborted = "Aborted"
	// ReasonDeadlineExceeded: spec.limits.deadline passed.
	ReasonDeadlineExceeded = "DeadlineExceeded"
	// ReasonTokenBudgetExceeded: status.treeTokens passed spec.limits.tokenBudget.
	ReasonTokenBudgetExceeded = "TokenBudgetExceeded"
	// ReasonCostBudgetExceeded: status.treeCost passed spec.limits.costBudget.
	ReasonCostBudgetExceeded = "CostBudgetExceeded"
	// ReasonTurnLimit: spec.limits.maxTurns was reached.
	ReasonTurnLimit = "TurnLimit"
	// ReasonConfigError: a referenced Secret or ConfigMap is missing or invalid.
	ReasonConfigError = "ConfigError"
	// ReasonQuotaExceeded: the namespace already runs its maximum of concurrent sessions; the
	// session stays Pending and starts when one of them finishes.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonJournalConnected: events are being journaled.
	ReasonJournalConnected = "Connected"
	// ReasonJournalUnavailable: the journal cannot be reached; the agent waits at the next boundary.
	ReasonJournalUnavailable = "Unavailable"
)

// Labels and annotations set by the operator.
const (
	// LabelSession is set on every object created for a session to the session's name.
	LabelSession = "agent-operator.dev/session"
	// LabelSessionUID is set on every object created for a session to the session's UID.
	LabelSessionUID = "agent-operator.dev/session-uid"
	// LabelParent is set on child sessions to the parent's name.
	LabelParent = "agent-operator.dev/parent"
	// LabelParentUID is set on child sessions to the parent's UID.
	LabelParentUID = "agent-operator.dev/parent-uid"
	// LabelRootUID is set on child sessions to the UID of their tree's top-level session, so
	// that replicas sharding sessions (--shard-sessions) keep a whole tree on one replica.
	LabelRootUID = "agent-operator.dev/root-uid"
	// AnnotationSharedWorkspace is set on child sessions that run in their parent's workspace
	// pod, to the parent's name.
	AnnotationSharedWorkspace = "agent-operator.dev/shared-workspace"
	// AnnotationSpawnCall is set on child sessions to the id of the spawn_agent call that
	// created them, so that the call, run again after a crash, adopts the child instead of
	// creating a second one.
	AnnotationSpawnCall = "agent-operator.dev/spawn-call"
	// LabelClass names the operator install that handles a session (like an IngressClass):
	// an install started with --session-class=X handles the sessions labelled X, and the
	// install without a class (the default) those without the label. Children inherit it.
	LabelClass = "agent-operator.dev/class"
	// AnnotationMaxSessions on a Namespace bounds its concurrent top-level sessions (a
	// positive integer). With the manager flag --max-sessions-per-namespace also set, the
	// smaller limit applies.
	AnnotationMaxSessions = "agent-operator.dev/max-sessions"
	// Finalizer keeps a session until its runner stopped and its journal was flushed.
	Finalizer = "agent-operator.dev/finalizer"
)
