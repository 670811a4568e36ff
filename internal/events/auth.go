package events

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Authentication of the embedded server (EmbeddedOptions.Auth). The server
// refuses every connection without credentials. Two kinds of users exist,
// both held in memory only and checked by the server's custom client
// authenticator:
//
//   - the manager: a random token made at start, never written anywhere,
//     used by Embedded.Connect (in-process connections); it may publish and
//     subscribe everywhere;
//   - readers: a random user and password minted by Embedded.MintReader for
//     one namespace, valid for new connections until they expire. A reader
//     may only read the events of that namespace through JetStream (see
//     ReaderPermissions) and publishes nowhere else: no event, no stream or
//     consumer administration outside its own read consumers.
//
// Who gets a reader credential is decided outside (the manager's credential
// endpoint asks Kubernetes RBAC, see CredentialHandler).

// ReaderCredential is what a reader connects with.
type ReaderCredential struct {
	// Namespace whose events the credential reads.
	Namespace string `json:"namespace"`
	// User and Password authenticate the connection (nats.UserInfo).
	User     string `json:"user"`
	Password string `json:"password"`
	// InboxPrefix must be set as the connection's custom inbox prefix
	// (nats.CustomInboxPrefix): the reader may subscribe to nothing else.
	InboxPrefix string `json:"inboxPrefix"`
	// Expires is when the credential stops opening new connections.
	Expires time.Time `json:"expires"`
}

// mintedReader is a reader as the authenticator keeps it.
type mintedReader struct {
	password string
	perms    *server.Permissions
	expires  time.Time
}

// authenticator implements server.Authentication.
type authenticator struct {
	managerToken string
	now          func() time.Time

	mu      sync.Mutex
	readers map[string]mintedReader
}

func newAuthenticator() (*authenticator, error) {
	tok, err := randomHex(32)
	if err != nil {
		return nil, err
	}
	return &authenticator{managerToken: tok, now: time.Now, readers: map[string]mintedReader{}}, nil
}

// Check implements server.Authentication: the manager's token, or a reader
// that exists, has not expired and presents its password. Anything else,
// including no credentials at all, is refused.
func (a *authenticator) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o == nil {
		return false
	}
	if o.Token != "" {
		if subtle.ConstantTimeCompare([]byte(o.Token), []byte(a.managerToken)) != 1 {
			return false
		}
		c.RegisterUser(&server.User{Username: "agent-operator-manager"})
		return true
	}
	if o.Username == "" {
		return false
	}
	a.mu.Lock()
	r, ok := a.readers[o.Username]
	now := a.now()
	a.pruneLocked(now)
	a.mu.Unlock()
	if !ok || !now.Before(r.expires) || subtle.ConstantTimeCompare([]byte(o.Password), []byte(r.password)) != 1 {
		return false
	}
	c.RegisterUser(&server.User{Username: o.Username, Permissions: r.perms})
	return true
}

// pruneLocked forgets expired readers.
func (a *authenticator) pruneLocked(now time.Time) {
	for u, r := range a.readers {
		if !now.Before(r.expires) {
			delete(a.readers, u)
		}
	}
}

// mint adds a reader of namespace for ttl.
func (a *authenticator) mint(cfg StreamConfig, namespace string, ttl time.Duration) (ReaderCredential, error) {
	if err := validateName(namespace, false); err != nil {
		return ReaderCredential{}, fmt.Errorf("mint reader: namespace %q: %w", namespace, err)
	}
	if ttl <= 0 {
		return ReaderCredential{}, errors.New("mint reader: ttl must be positive")
	}
	id, err := randomHex(16)
	if err != nil {
		return ReaderCredential{}, err
	}
	pw, err := randomHex(32)
	if err != nil {
		return ReaderCredential{}, err
	}
	cred := ReaderCredential{
		Namespace:   namespace,
		User:        "reader-" + id,
		Password:    pw,
		InboxPrefix: "_INBOX_" + id,
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	a.pruneLocked(now)
	cred.Expires = now.Add(ttl)
	a.readers[cred.User] = mintedReader{password: pw, perms: ReaderPermissions(cfg, namespace, cred.InboxPrefix), expires: cred.Expires}
	return cred, nil
}

// ReaderPermissions are the subject permissions of a reader of namespace:
// what events.Replay and events.Follow need to read that namespace's
// sessions with an ordered (pull) consumer, and nothing more.
//
// Publish (JetStream API requests):
//   - $JS.API.STREAM.INFO.<stream>: open the stream;
//   - $JS.API.DIRECT.GET.<stream>.<prefix>.<ns>.>: the last message of a
//     session (the stream allows direct get, whose subject names the filter);
//   - $JS.API.CONSUMER.CREATE.<stream>.*.<prefix>.<ns>.>: create an
//     ephemeral consumer whose filter subject, which the server checks
//     against the request's subject, is inside the namespace;
//   - $JS.API.CONSUMER.MSG.NEXT, .INFO and .DELETE of <stream>: pull from,
//     reset and delete those consumers;
//   - the same for the Object Store bucket of large events (reading an
//     object needs its name, which holds the session's UID);
//   - the same for the namespace's own bucket of recorded changes
//     (ChangesBucket): no other namespace's bucket.
//
// Subscribe: only inboxPrefix.> (the replies and the pulled messages).
// Everything else, event subjects included, is denied: a reader cannot
// publish an event or read another namespace.
func ReaderPermissions(cfg StreamConfig, namespace, inboxPrefix string) *server.Permissions {
	cfg = cfg.withDefaults()
	st, obj := cfg.Name, "OBJ_"+cfg.LargeBucket
	pub := []string{
		"$JS.API.STREAM.INFO." + st,
		"$JS.API.DIRECT.GET." + st + "." + cfg.Prefix + "." + namespace + ".>",
		"$JS.API.CONSUMER.CREATE." + st + ".*." + cfg.Prefix + "." + namespace + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + st + ".*",
		"$JS.API.CONSUMER.INFO." + st + ".*",
		"$JS.API.CONSUMER.DELETE." + st + ".*",
		"$JS.API.STREAM.INFO." + obj,
		"$JS.API.DIRECT.GET." + obj + ".$O." + cfg.LargeBucket + ".M.*",
		"$JS.API.CONSUMER.CREATE." + obj + ".*.$O." + cfg.LargeBucket + ".C.*",
		"$JS.API.CONSUMER.MSG.NEXT." + obj + ".*",
		"$JS.API.CONSUMER.INFO." + obj + ".*",
		"$JS.API.CONSUMER.DELETE." + obj + ".*",
	}
	// The namespace's own bucket of recorded changes (kubectl agent diff/cp).
	cb := ChangesBucket(namespace)
	cobj := "OBJ_" + cb
	pub = append(pub,
		"$JS.API.STREAM.INFO."+cobj,
		"$JS.API.DIRECT.GET."+cobj+".$O."+cb+".M.*",
		"$JS.API.CONSUMER.CREATE."+cobj+".*.$O."+cb+".C.*",
		"$JS.API.CONSUMER.MSG.NEXT."+cobj+".*",
		"$JS.API.CONSUMER.INFO."+cobj+".*",
		"$JS.API.CONSUMER.DELETE."+cobj+".*",
	)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{inboxPrefix + ".>"}},
	}
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random: %w", err)
	}
	return hex.EncodeToString(b), nil
}
