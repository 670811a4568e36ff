package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of StreamConfig.
const (
	DefaultStreamName  = "AGENT_EVENTS"
	DefaultPrefix      = "agents"
	DefaultLargeBucket = "AGENT_EVENTS_LARGE"
	DefaultMaxAge      = 7 * 24 * time.Hour
	DefaultDuplicates  = 2 * time.Minute
)

// StreamConfig configures the events stream and the Object Store bucket that
// holds oversized events. The zero value of every field means its default
// (see DefaultStreamConfig); the Helm chart maps its values onto this struct.
type StreamConfig struct {
	// Name of the stream. Default AGENT_EVENTS.
	Name string `json:"name,omitempty"`
	// Prefix is the first subject token. Default "agents"; the stream
	// captures "<Prefix>.>".
	Prefix string `json:"prefix,omitempty"`
	// Storage is "file" (default) or "memory".
	Storage string `json:"storage,omitempty"`
	// Retention must be "limits" (the default): the stream is the journal,
	// and the interest and workqueue policies would delete it.
	Retention string `json:"retention,omitempty"`
	// Discard is what happens when MaxBytes is reached: "old" (default)
	// deletes the oldest events, "new" refuses new events (sessions then
	// pause with their journal unavailable).
	Discard string `json:"discard,omitempty"`
	// MaxAge is how long events are kept. Default 7 days; negative means
	// forever.
	MaxAge time.Duration `json:"maxAge,omitempty"`
	// MaxBytes bounds the stream size; 0 or negative means unlimited.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// MaxMsgSize bounds one message; 0 means the server's max_payload.
	// Larger events go to the Object Store.
	MaxMsgSize int32 `json:"maxMsgSize,omitempty"`
	// Replicas of the stream and bucket. Default 1.
	Replicas int `json:"replicas,omitempty"`
	// Duplicates is the dedupe window of Nats-Msg-Id. Default 2 minutes.
	Duplicates time.Duration `json:"duplicates,omitempty"`
	// LargeBucket names the Object Store bucket for oversized events.
	// Default AGENT_EVENTS_LARGE. It shares MaxAge, Storage and Replicas.
	LargeBucket string `json:"largeBucket,omitempty"`
	// LargeMaxBytes bounds the bucket; 0 or negative means unlimited.
	LargeMaxBytes int64 `json:"largeMaxBytes,omitempty"`
}

// DefaultStreamConfig returns the configuration with every default filled in.
func DefaultStreamConfig() StreamConfig { return StreamConfig{}.withDefaults() }

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Name == "" {
		c.Name = DefaultStreamName
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Storage == "" {
		c.Storage = "file"
	}
	if c.Retention == "" {
		c.Retention = "limits"
	}
	if c.Discard == "" {
		c.Discard = "old"
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Duplicates == 0 {
		c.Duplicates = DefaultDuplicates
	}
	if c.LargeBucket == "" {
		c.LargeBucket = DefaultLargeBucket
	}
	return c
}

// Validate reports the first invalid field.
func (c StreamConfig) Validate() error {
	_, _, err := c.jetStreamConfigs()
	return err
}

// jetStreamConfigs maps the configuration onto the stream and bucket configs.
func (c StreamConfig) jetStreamConfigs() (jetstream.StreamConfig, jetstream.ObjectStoreConfig, error) {
	c = c.withDefaults()
	var storage jetstream.StorageType
	switch c.Storage {
	case "file":
		storage = jetstream.FileStorage
	case "memory":
		storage = jetstream.MemoryStorage
	default:
		return jetstream.StreamConfig{}, jetstream.ObjectStoreConfig{}, fmt.Errorf("validate stream config: storage %q is not file or memory", c.Storage)
	}
	if c.Retention != "limits" {
		return jetstream.StreamConfig{}, jetstream.ObjectStoreConfig{}, fmt.Errorf("validate stream config: retention %q: only limits keeps the journal of a session", c.Retention)
	}
	var discard jetstream.DiscardPolicy
	switch c.Discard {
	case "old":
		discard = jetstream.DiscardOld
	case "new":
		discard = jetstream.DiscardNew
	default:
		return jetstream.StreamConfig{}, jetstream.ObjectStoreConfig{}, fmt.Errorf("validate stream config: discard %q is not old or new", c.Discard)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return jetstream.StreamConfig{}, jetstream.ObjectStoreConfig{}, fmt.Errorf("validate stream config: replicas %d is not in 1..5", c.Replicas)
	}
	if c.Duplicates < 0 {
		return jetstream.StreamConfig{}, jetstream.ObjectStoreConfig{}, fmt.Errorf("validate stream config: negative duplicates window")
	}
	if c.MaxMsgSize < 0 {
		return jetstream.StreamConfig{}, jetstream.ObjectStoreConfig{}, fmt.Errorf("validate stream config: negative maxMsgSize")
	}
	if c.MaxMsgSize > 0 && c.MaxMsgSize < minMsgSize {
		return jetstream.StreamConfig{}, jetstream.ObjectStoreConfig{}, fmt.Errorf("validate stream config: maxMsgSize %d is below %d", c.MaxMsgSize, minMsgSize)
	}
	maxAge := c.MaxAge
	if maxAge < 0 {
		maxAge = 0
	}
	maxBytes := c.MaxBytes
	if maxBytes <= 0 {
		maxBytes = -1
	}
	largeMax := c.LargeMaxBytes
	if largeMax <= 0 {
		largeMax = -1
	}
	sc := jetstream.StreamConfig{
		Name:        c.Name,
		Description: "agent-operator session events (the journal of each AgentSession)",
		Subjects:    []string{c.Prefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     discard,
		MaxAge:      maxAge,
		MaxBytes:    maxBytes,
		MaxMsgs:     -1,
		MaxMsgSize:  c.MaxMsgSize,
		Storage:     storage,
		Replicas:    c.Replicas,
		Duplicates:  c.Duplicates,
		AllowDirect: true,
	}
	oc := jetstream.ObjectStoreConfig{
		Bucket:      c.LargeBucket,
		Description: "agent-operator events too large for one message",
		TTL:         maxAge,
		MaxBytes:    largeMax,
		Storage:     storage,
		Replicas:    c.Replicas,
	}
	return sc, oc, nil
}

// minMsgSize is the smallest MaxMsgSize accepted: a reference envelope must fit.
const minMsgSize = 8 << 10

// EnsureStream creates or updates the stream and the Object Store bucket, then
// reads the stream config back to catch servers that silently drop fields.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) error {
	sc, oc, err := cfg.jetStreamConfigs()
	if err != nil {
		return err
	}
	st, err := js.CreateOrUpdateStream(ctx, sc)
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", sc.Name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("read back stream %s: %w", sc.Name, err)
	}
	got := info.Config
	if got.Duplicates != sc.Duplicates || got.MaxAge != sc.MaxAge || got.Storage != sc.Storage || len(got.Subjects) != 1 || got.Subjects[0] != sc.Subjects[0] {
		return fmt.Errorf("ensure stream %s: server stored a different config (duplicates %s, maxAge %s, storage %s, subjects %v)",
			sc.Name, got.Duplicates, got.MaxAge, got.Storage, got.Subjects)
	}
	if _, err := js.CreateOrUpdateObjectStore(ctx, oc); err != nil {
		return fmt.Errorf("ensure object store %s: %w", oc.Bucket, err)
	}
	return nil
}

// errPermanent marks publish failures that retrying cannot fix.
var errPermanent = errors.New("permanent journal error")
