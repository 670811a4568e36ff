package loop

import "errors"

// Sentinel errors of the Session API.
var (
	// ErrClosed is returned by calls on a closed session and is the cause
	// of a Submit interrupted by Close.
	ErrClosed = errors.New("session closed")
	// ErrBusy is returned by Submit or Resume while another input runs.
	ErrBusy = errors.New("session is processing another input")
	// ErrInvalidTransition wraps state changes seed 000 §2.3 does not allow.
	ErrInvalidTransition = errors.New("invalid session state transition")
	// ErrResumeRequired is returned by Submit on a session restored in the
	// middle of processing: call Resume first.
	ErrResumeRequired = errors.New("session was restored mid-processing: call Resume first")
	// ErrModelUnavailable is wrapped by the error of a Submit or Resume that
	// paused because the model kept failing with transient errors (rate
	// limit, server, network) after the client's retries, in a session made
	// WithPauseOnModelOutage. The session is not closed: call Resume to try
	// the same model call again.
	ErrModelUnavailable = errors.New("model unavailable")
)
