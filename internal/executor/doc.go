// Package executor is the wire protocol between the operator and the
// executor sidecar in a workspace pod, with a server that serves any
// tool.ExecutionEnvironment over a byte stream and a client that is a
// tool.ExecutionEnvironment over a byte stream.
//
// # Protocol (version 2)
//
// The stream carries frames in both directions. During the handshake a
// frame is a 4-byte big-endian length followed by that many bytes of JSON
// (a Frame), as in version 1, so peers of different versions still
// understand each other's hello and version error.
//
// The client first sends {"kind":"hello","body":{"version":2,"key":...}}
// with a fresh random 32-byte stream key (base64). The server answers with
// a hello carrying its version, working directory, platform, OS version,
// frame limit and a proof (HMAC-SHA256 with the key over those fields), or
// with an error frame: a hello of another version is refused with code
// "version" and the server closes; a hello without a key is refused with
// "bad_request" and the server waits for another. The client refuses a hello
// without a valid proof.
//
// After the handshake every frame, in both directions, is authenticated:
//
//	length (4 bytes) | header tag (16) | JSON (length bytes) | body tag (32)
//
// The header tag is HMAC-SHA256(key, direction | "H" | seq | length)
// truncated to 16 bytes; the body tag is HMAC-SHA256(key, direction | "B" |
// seq | length | JSON). direction is 'C' (client to server) or 'S'; seq is
// the frame's position in its direction, counted from 0 after the
// handshake and never sent. A receiver checks the header tag before it
// trusts the length, and the body tag before it decodes the JSON. Bytes that
// fail either check (forged, replayed, dropped, reordered, reflected or
// corrupted frames) make the stream unusable: the receiver fails it with an
// error wrapping ErrFrameAuth and never reads another frame from it; the
// client then fails every call in flight with ErrStreamClosed. A frame that
// stays half-received longer than the client's stall timeout fails the
// stream the same way; bytes the client has read ahead (it reads up to
// 64 KiB at a time) count as the start of the next frame. See
// docs/security.md ("Control-stream integrity") for the threat: the
// workspace's commands run as the executor's user.
//
// Genuine frames larger than the receiver's limit (DefaultMaxFrame unless
// configured) are skipped whole and answered with a connection-level error
// frame; a sender refuses to send one.
//
// Then the client sends "call" frames, each with a fresh non-zero id, an op
// (read_file, write_file, delete_file, file_exists, list_directory, exec,
// grep, glob, initialize, cleanup, stdio, fetch), a JSON body and
// optionally an owner (see "Call owners"); a call of any other op is
// answered with an error frame of code "unknown_op". The server handles
// calls concurrently and answers each with exactly one "result" or "error"
// frame with the same id; an exec call may be preceded by "output" frames
// carrying chunks of output while the command runs (with "stream":true);
// with "streamLimit":N as well, a server announcing "stream_limit"
// (FeatureStreamLimit) sends at most N bytes of output in those frames and
// none after, while the command runs on to its result (a client asks for
// DefaultStreamLimit, see WithStreamLimit, and forwards no more than that
// from servers that predate the feature). A "cancel" frame with a
// call's id cancels that call (an exec is terminated and answers with an
// error frame of code "canceled" whose body holds the partial result). A
// genuine frame that does not decode gets an error frame (id 0 when the id
// is unknown) and never ends the stream. When the input ends, every call in flight is
// cancelled.
//
// # Stdio processes
//
// A "stdio" call (body StdioArgs: argv, env added to the executor's
// filtered environment, working directory under the root; no shell) starts
// a long-running process in its own process group and keeps the call open
// until the process ends, so a client can speak to it, e.g. an MCP server
// over stdio. The server answers a started process with one "started" frame
// (its pid), then relays its stdout as "stdout" frames (data, at most 64 KiB
// each) in order; the client sends its stdin as "stdin" frames with the
// call's id (data, or "eof":true to close stdin). When the process exits
// (and its stdout is drained) the call ends with a "result" frame holding
// its exit code and the last 4 KiB of its stderr (StdioResult). A "cancel"
// frame, the end of the stream (or of Serve) stops the process group
// (SIGTERM, SIGKILL after the grace period, also for members that outlive
// the leader) and the call ends with an error frame of code "canceled"
// whose body is the StdioResult. A start that fails is an ordinary error
// answer and no "started" frame is sent. Stdin frames for a process that
// has ended are dropped; the client learns of the end from the final frame.
//
// Everything is bounded and a misbehaving process fails only its own call:
// frames obey the frame limit; the server reads stdout one chunk at a time
// and writes it to the stream (a slow stream slows the process through its
// pipe); the client holds at most DefaultStdioBuffer bytes (WithStdioBuffer)
// of stdout its reader has not read and past that cancels the call (Read
// fails with ErrStdioOverflow); the server queues at most DefaultStdinQueue
// bytes (ServeOptions.MaxStdinQueue) of stdin the process has not read and
// past that stops the process (error code "too_large").
//
// The protocol version stays 2. The new frame kinds ("started", "stdout",
// "stdin") are only ever sent within a stdio call, which only a client that
// knows them starts and only a server that knows them accepts: an executor
// that predates the op answers the call with an error of code "unknown_op"
// before any stdio frame is exchanged, and StartStdio turns that into
// ErrStdioUnsupported ("update the executor image"). Nothing else in the
// exchange changed, so peers of either age keep working with each other;
// a version bump would instead refuse every stream between a new manager
// and an old executor image, not just stdio processes.
//
// # Fetch
//
// The "fetch" op (added within version 2) fetches a URL from the server's
// host, so the workspace pod's network rules apply to it: its body is a
// tool.FetchRequest (url, maxBytes, timeout in nanoseconds, allowPrivate,
// allowHosts), its result a tool.FetchResult (final url, status,
// contentType, text, truncated, bytes). The server refuses internal
// addresses unless the request allows them, bounds the body and the time
// (see package webfetch) and answers a timeout with code
// "deadline_exceeded". A server that predates the op, or whose environment
// cannot fetch, answers "unknown_op"; the client reports that as
// tool.ErrFetchUnsupported ("the workspace's executor is too old").
//
// # Owner records
//
// The client's hello may carry an optional owner token,
// "owner":{"sessionUID":...,"holder":...,"epoch":...} (Owner, set with
// WithOwner): the AgentSession driven over the stream, the operator
// instance driving it (its claim Lease's holderIdentity) and the claim's
// epoch (the Lease's leaseTransitions, which grow with every change of
// driver). Servers that predate the field ignore it; a stream without one
// is never checked. The protocol version stays 2.
//
// For a stream with an owner the server keeps, in a directory shared by all
// serve processes of the pod (ServeOptions.OwnerDir, default
// DefaultOwnerDir, created 0700), one record per session UID: the newest
// holder and epoch it has seen. At the hello and before every call of the
// stream it checks the record under the session's flock: a newer epoch, or
// the same epoch with another holder, refuses the hello or the call with an
// error of code "not_owner" (ErrNotOwner through RemoteError.Unwrap) whose
// message names the current holder (quoted) and epoch, and whose "owner"
// field carries them; a newer (or first) epoch of the stream's own is
// recorded; the record's epoch never goes back. A refused hello ends the
// stream; a refused call leaves the stream open (its calls keep being
// refused), and a call already running when a newer driver arrives is not
// interrupted. The record is written through a new temporary file renamed
// over it; records and locks are opened without following symbolic links,
// must be regular files and are read up to 4 KiB: a record that is not an
// executor's (garbage, too large, a link, a FIFO, a lock held for longer
// than two seconds) refuses its session's calls with not_owner too, and
// affects no other session. See docs/security.md ("Superseded drivers").
//
// # Features
//
// A server announces what it accepts beyond the version's base protocol in
// its hello: "features":["call_owner","stream_limit",...], bound to the key by
// "featuresProof" (HMAC-SHA256 with the key over a domain string and the
// features' JSON), while "proof" covers the hello without its features as
// before. Clients that predate features ignore both fields; a client refuses
// a hello whose features are not proven (ErrFrameAuth). A client checks that
// the hello announces a feature (Hello.HasFeature) before it relies on it,
// without a round trip. A server started with ServeOptions.WithoutFeatures
// neither announces nor accepts those features, like an executor that
// predates them. The protocol version stays 2.
//
// # Call owners
//
// A call frame may carry an owner token of its own, "owner":{...} (an
// Owner; Frame.Owner, set with ContextWithCallOwner), so that one stream
// without an owner can serve the calls of many sessions, e.g. every session
// sharing a workspace pod, each call checked against its own session. A
// server with FeatureCallOwner checks such a call against that owner's
// record exactly as it checks the calls of a stream whose hello carried the
// owner: before each call, under the session's flock; a first (or newer)
// epoch is recorded, a superseded owner or an unusable record refuses the
// call with "not_owner" (ErrNotOwner). A refusal refuses only that call:
// the stream stays open and the calls of other owners (and later calls of
// the same owner, which keep being refused) go on. A call already running
// when a newer driver arrives is not interrupted.
//
// The server keeps no state per call owner: every call with an owner reads
// and updates its session's record, exactly like every call of an owned
// stream, so there is nothing to bound or evict however many sessions share
// a stream, and a call is never let through on the strength of an earlier
// check (a record that was tampered with and then repaired refuses and then
// accepts again, as for an owned stream).
//
// On a stream whose hello carried an owner a call owner must be that owner:
// any other is refused with "bad_request", so a stream is either one
// session's or shared, never both. Calls without an owner are checked as
// before (against the stream's owner, if any; not at all on a stream
// without one).
//
// A server announces the feature in its hello as "call_owner"
// (FeatureCallOwner, see "Features"). A server that predates it ignores the
// field and would run the call unchecked, so a client refuses to send a call
// with an owner to a server that does not announce it
// (ErrCallOwnerUnsupported, without a round trip); the caller then opens a
// stream with the owner in its hello instead.
//
// ProtectProcess makes the serving process non-dumpable, so processes of
// the same user (the commands it runs) cannot open its descriptors or read
// the key from its memory; the sidecar calls it before serving.
package executor
