// Package k8senv implements tool.ExecutionEnvironment for a Kubernetes pod
// (seed 000 §4, KubernetesExecutionEnvironment).
//
// Every call is served by the executor sidecar (`executor-sidecar serve`)
// inside the workspace container, reached over pod exec (client-go
// remotecommand: WebSocket first, SPDY fallback, exactly kubectl's wiring).
// In the default persistent mode one long-lived exec stream per pod carries
// all calls of all sessions using that pod (a Pool keyed by
// namespace/pod/container); the stream is reopened by the next call after it
// drops, and calls in flight when it drops fail with an error wrapping
// executor.ErrStreamClosed and are never re-run. Timeouts, process-group
// kills and path confinement happen inside the pod, so cancelling a call
// really stops the remote command (an exec'd process outlives its client).
//
// A session's calls carry its owner token (Target.Owner) as the executor's
// call owner (executor.ContextWithCallOwner), so however many sessions share
// a pod, e.g. a parent and its subagent children, the pod runs one executor
// process for them, and each call is checked against its own session's
// owner record: a superseded driver's calls fail with executor.ErrNotOwner,
// only they, and the stream stays open for the others. An executor that
// predates call owners (its hello does not announce
// executor.FeatureCallOwner) would run such calls unchecked, so against one
// a session with an owner falls back to a stream of its own with the owner
// in its hello, as before.
//
// The stream is authenticated (executor protocol version 2): bytes the
// sidecar did not send, e.g. frames a workspace process forged, fail the
// calls in flight with an error wrapping executor.ErrFrameAuth (and
// executor.ErrStreamClosed) and never become a result; the next call opens a
// new stream.
//
// Before opening every stream the pod is read and checked against an
// Expect (labels, owner UID) and must be Running with the container running.
// An environment expecting what the stream was opened for does not read the
// pod again; one expecting something else reads and checks it once per
// stream. Env.Open opens the stream ahead of the first call (and has the
// sidecar record the session's owner, or refuse it); Config.OnOpen is told
// how long the pod check and the exec handshake took.
//
// Pool.Preopen keeps one spare stream, opened without an owner, to a pod no
// session uses yet (a warm pool pod that is ready and unclaimed). The first
// time the pod's shared stream is opened it takes the spare over instead of
// opening an exec: the pod is read and checked against the opening session's
// Expect and one round trip shows the spare alive, reported to
// Config.OnOpen as StagePodCheck and StageSpare; the spare then is the
// pod's shared stream, still without an owner of its own (the sessions'
// owners travel with their calls). A spare is taken over once at most, is
// never reopened when it ends, and on any failure is closed and a new stream
// opened as usual. Pool.DropSpare, Release and Close close spares.
//
// Opening a stream is retried while the API server is unavailable (it
// refuses connections, or answers 5xx or 429): for Config.ReconnectTimeout,
// or, under a Wait (ContextWithWait, which the runner gives each input), for
// the Wait's tolerance, as long as its Context lives and past the call's own
// deadline, reporting each failed attempt; a call whose deadline passed
// meanwhile fails with ErrCallNotRun and leaves the stream it waited for to
// the next call.
//
// The per-call mode opens one exec per call, like `kubectl exec`; it exists
// for comparison in benchmarks.
package k8senv
