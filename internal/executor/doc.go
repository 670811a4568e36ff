// Package executor is the wire protocol between the operator and the
// executor sidecar in a workspace pod, with a server that serves any
// tool.ExecutionEnvironment over a byte stream and a client that is a
// tool.ExecutionEnvironment over a byte stream.
//
// # Protocol (version 1)
//
// The stream carries frames in both directions. A frame is a 4-byte
// big-endian length followed by that many bytes of JSON (a Frame). Frames
// larger than the receiver's limit (DefaultMaxFrame unless configured) are
// skipped whole and answered with a connection-level error frame; a sender
// refuses to send one.
//
// The client first sends {"kind":"hello","body":{"version":1,...}}; the server
// answers with a hello carrying its version, working directory, platform, OS
// version and frame limit, or with an error frame and closes.
//
// Then the client sends "call" frames, each with a fresh non-zero id, an op
// (read_file, write_file, delete_file, file_exists, list_directory, exec,
// grep, glob, initialize, cleanup) and a JSON body. The server handles calls
// concurrently and answers each with exactly one "result" or "error" frame
// with the same id; an exec call may be preceded by "output" frames carrying
// chunks of output while the command runs. A "cancel" frame with a call's id
// cancels that call (an exec is terminated and answers with an error frame
// of code "canceled" whose body holds the partial result). A malformed frame
// gets an error frame (id 0 when the id is unknown) and never ends the stream.
// When the input ends, every call in flight is cancelled.
package executor
