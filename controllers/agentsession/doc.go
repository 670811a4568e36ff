// Package agentsession reconciles AgentSessions: it creates the workspace pod
// (deterministic name <session>-ws, controller ownerReference, session labels,
// restricted security context), starts one runner per session once the pod is
// Ready, mirrors runner progress into status (the runner notifies through a
// channel source, rate-limited), delivers appended messages exactly once, and
// handles suspend, abort, deadlines, token budgets, ttlSecondsAfterFinished
// and deletion (finalizer: abort the loop, flush the journal, delete the pod).
//
// Pod loss policy: a session whose loop has started and whose pod disappears
// or fails is Failed with reason WorkspaceLost when /workspace is an emptyDir
// (the work is gone); with a persistentVolumeClaim the runner is detached, the
// pod recreated on the same claim and the session resumes from its journal.
//
// Classes: the reconciler drives only the sessions of its Class; a session of
// another class that no install took up within ReportUnservedAfter is marked
// Pending with Accepted=False/ClassNotServed (see unserved.go).
//
// Work-queue priority and write volume: a session without a phase is
// enqueued at FirstStatusPriority, ahead of the work of the sessions under way
// (firstpriority.go); progress-only status changes are written at most once
// per StatusInterval while phase and condition changes go at once
// (statuswrites.go); a child wakes its parent at once only when it is created,
// deleted or changes phase (parentwake.go).
package agentsession
