package loop

import (
	"fmt"
	"time"
)

// Defaults of seed 000 §2.2.
const (
	DefaultCommandTimeout      = 10 * time.Second
	DefaultMaxCommandTimeout   = 600 * time.Second
	DefaultLoopDetectionWindow = 10
	DefaultMaxSubagentDepth    = 1
	DefaultEventBuffer         = 1024
)

// SessionConfig holds the limits, timeouts and settings of a session
// (seed 000 §2.2). Start from DefaultConfig and change what you need: the
// zero value of EnableLoopDetection is false.
type SessionConfig struct {
	// MaxTurns bounds the model calls of the whole session (0 = unlimited).
	MaxTurns int
	// MaxToolRoundsPerInput bounds tool rounds per user input (0 = unlimited).
	MaxToolRoundsPerInput int
	// DefaultCommandTimeout applies to shell calls without timeout_ms. Zero
	// means the profile's shell default (Capabilities.DefaultCommandTimeout),
	// or 10 s when the profile has none.
	DefaultCommandTimeout time.Duration
	// MaxCommandTimeout caps timeout_ms (default 600 s).
	MaxCommandTimeout time.Duration
	// ReasoningEffort is "low", "medium", "high", "" (provider default) or a
	// provider-specific value passed through.
	ReasoningEffort string
	// ToolOutputLimits overrides per-tool character limits (§5.2); a value
	// <= 0 disables the limit for that tool.
	ToolOutputLimits map[string]int
	// ToolLineLimits overrides per-tool line limits (§5.3); a value <= 0
	// disables the limit for that tool.
	ToolLineLimits map[string]int
	// EnableLoopDetection turns the repeating-pattern check on (default true).
	EnableLoopDetection bool
	// LoopDetectionWindow is the number of recent tool calls checked (default 10).
	LoopDetectionWindow int
	// MaxSubagentDepth is the maximum nesting level of subagents (default 1:
	// the top-level session may spawn, its children may not).
	MaxSubagentDepth int
	// UserInstructions are appended last to the system prompt (§6.1 layer 5).
	UserInstructions string
	// Limits are the seed 002 tool-batch limits (limits.go); zero fields
	// take the defaults.
	Limits ToolLimits
	// FileDenyPatterns are added to DefaultDeniedPaths: paths the file
	// tools refuse (pathguard.go for the pattern syntax).
	FileDenyPatterns []string
	// FileAllowPatterns exempt paths from the denials (default
	// DefaultAllowedPaths, e.g. ".env.example").
	FileAllowPatterns []string
	// Compaction configures context accounting and compaction
	// (compaction.go); the zero value compacts at the defaults.
	Compaction CompactionConfig
	// StaleToolResultTurns makes tool results older than this many model
	// turns be sent as one-line summaries (stale.go): 0 means
	// DefaultStaleToolResultTurns, a negative value turns it off. History
	// and journal always keep the full results.
	StaleToolResultTurns int
	// Skills are in-memory skills (e.g. from ConfigMaps) added to the
	// SKILL.md files discovered in the workspace (skills.go). On a name
	// clash the in-memory skill wins and the discovered one is reported in
	// a WARNING.
	Skills []Skill
	// SkillWarnings are problems the host met loading Skills (e.g. a
	// ConfigMap key that is not a valid SKILL.md); the session emits them
	// as WARNING events when it gathers its prompt context.
	SkillWarnings []string
	// DisableSkillDiscovery skips the search for SKILL.md files.
	DisableSkillDiscovery bool
}

// DefaultConfig returns the defaults of seed 000 §2.2.
func DefaultConfig() SessionConfig {
	return SessionConfig{
		MaxCommandTimeout:   DefaultMaxCommandTimeout,
		EnableLoopDetection: true,
		LoopDetectionWindow: DefaultLoopDetectionWindow,
		MaxSubagentDepth:    DefaultMaxSubagentDepth,
	}
}

func (c *SessionConfig) validate() error {
	switch {
	case c.MaxTurns < 0:
		return fmt.Errorf("max turns %d is negative", c.MaxTurns)
	case c.MaxToolRoundsPerInput < 0:
		return fmt.Errorf("max tool rounds per input %d is negative", c.MaxToolRoundsPerInput)
	case c.DefaultCommandTimeout < 0 || c.MaxCommandTimeout < 0:
		return fmt.Errorf("command timeouts must not be negative")
	case c.LoopDetectionWindow < 0:
		return fmt.Errorf("loop detection window %d is negative", c.LoopDetectionWindow)
	case c.MaxSubagentDepth < 0:
		return fmt.Errorf("max subagent depth %d is negative", c.MaxSubagentDepth)
	}
	if err := c.Compaction.validate(); err != nil {
		return err
	}
	for i, sk := range c.Skills {
		if err := sk.validate(); err != nil {
			return fmt.Errorf("skill %d: %w", i+1, err)
		}
	}
	if c.MaxCommandTimeout == 0 {
		c.MaxCommandTimeout = DefaultMaxCommandTimeout
	}
	if c.LoopDetectionWindow == 0 {
		c.LoopDetectionWindow = DefaultLoopDetectionWindow
	}
	return nil
}

// State is the lifecycle state of a session (seed 000 §2.3).
type State string

// Session states.
const (
	StateIdle          State = "IDLE"
	StateProcessing    State = "PROCESSING"
	StateAwaitingInput State = "AWAITING_INPUT"
	StateClosed        State = "CLOSED"
)

// transitions are exactly the edges of seed 000 §2.3 ("any -> CLOSED" is
// handled separately).
var transitions = map[State][]State{
	StateIdle:          {StateProcessing, StateClosed},
	StateProcessing:    {StateProcessing, StateAwaitingInput, StateIdle, StateClosed},
	StateAwaitingInput: {StateProcessing},
}

// CanTransition reports whether seed 000 §2.3 allows from -> to.
func CanTransition(from, to State) bool {
	if to == StateClosed && from != StateClosed {
		return true // any -> CLOSED (abort)
	}
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}
