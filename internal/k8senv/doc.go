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
// stream. Env.Open opens the stream ahead of the first call; Config.OnOpen
// is told how long the pod check and the exec handshake took.
//
// Pool.Preopen keeps one spare stream, opened without an owner, to a pod no
// session uses yet (a warm pool pod that is ready and unclaimed). The first
// stream with an owner that a session opens to that pod takes the spare
// over instead of opening an exec: the pod is read and checked against the
// session's Expect and the spare adopts the session's owner (the executor's
// adopt_owner, checked against the owner record exactly like a hello with
// that owner), reported to Config.OnOpen as StagePodCheck and StageAdopt. A
// spare is handed to one session at most, is never reopened when it ends,
// and on any failure is closed and a new stream opened as usual.
// Pool.DropSpare, Release and Close close spares.
//
// The per-call mode opens one exec per call, like `kubectl exec`; it exists
// for comparison in benchmarks.
package k8senv
