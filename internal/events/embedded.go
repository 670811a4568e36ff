package events

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedOptions configures an in-process nats-server with JetStream.
type EmbeddedOptions struct {
	// StoreDir is the JetStream store directory (a PVC in a cluster, a
	// t.TempDir in tests). Required.
	StoreDir string
	// Port is the client port: 0 serves in-process connections only, -1
	// picks a free port, any other value listens on it. A listening server
	// lets kubectl-agent reach it through kubectl port-forward.
	Port int
	// Host is the listen address when Port is not 0. Default 127.0.0.1.
	Host string
	// MaxMemory and MaxStore bound JetStream memory and file storage in
	// bytes; 0 lets the server choose.
	MaxMemory, MaxStore int64
	// MaxPayload overrides the server's max_payload (default 1 MiB).
	MaxPayload int32
	// ServerName names the server; default "agent-operator-embedded".
	ServerName string
	// Auth makes the server refuse connections without credentials:
	// Connect authenticates as the manager, and MintReader issues read-only
	// credentials for one namespace (see auth.go).
	Auth bool
	// Stream names the stream, prefix and bucket the reader permissions of
	// MintReader refer to; zero fields take their defaults.
	Stream StreamConfig
}

// Embedded is an in-process nats-server with JetStream. It implements
// nats.InProcessConnProvider for the running server, so a connection made by
// Connect reconnects after Stop and Start.
type Embedded struct {
	opts EmbeddedOptions

	mu     sync.Mutex
	srv    *server.Server
	port   int
	closed bool
	// auth is set when opts.Auth: it outlives Stop and Start.
	auth *authenticator
}

// StartEmbedded starts an embedded server and waits until it accepts
// connections.
func StartEmbedded(ctx context.Context, opts EmbeddedOptions) (*Embedded, error) {
	if opts.StoreDir == "" {
		return nil, errors.New("start embedded nats: empty store dir")
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.ServerName == "" {
		opts.ServerName = "agent-operator-embedded"
	}
	e := &Embedded{opts: opts, port: opts.Port}
	if opts.Auth {
		a, err := newAuthenticator()
		if err != nil {
			return nil, fmt.Errorf("start embedded nats: %w", err)
		}
		e.auth = a
	}
	if err := e.Start(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Start starts the server again after Stop, on the same store directory and
// port. It is a no-op when the server runs.
func (e *Embedded) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("start embedded nats: shut down")
	}
	if e.srv != nil {
		return nil
	}
	so := &server.Options{
		ServerName:         e.opts.ServerName,
		JetStream:          true,
		StoreDir:           e.opts.StoreDir,
		JetStreamMaxMemory: e.opts.MaxMemory,
		JetStreamMaxStore:  e.opts.MaxStore,
		MaxPayload:         e.opts.MaxPayload,
		NoSigs:             true,
		NoLog:              true,
		DontListen:         e.port == 0,
		Host:               e.opts.Host,
		Port:               e.port,
		// Every acknowledged write is fsynced before the ack: the stream is
		// the journal, and a crash must not lose an event a writer saw
		// acknowledged.
		SyncAlways: true,
	}
	if e.auth != nil {
		so.CustomClientAuthentication = e.auth
	}
	srv, err := server.NewServer(so)
	if err != nil {
		return fmt.Errorf("start embedded nats: %w", err)
	}
	srv.Start()
	wait := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d)
	}
	if !srv.ReadyForConnections(wait) {
		srv.Shutdown()
		return errors.New("start embedded nats: not ready for connections")
	}
	if e.port == -1 {
		if addr, ok := srv.Addr().(*net.TCPAddr); ok {
			e.port = addr.Port
		}
	}
	e.srv = srv
	return nil
}

// Stop shuts the server down, keeping its store; connections made by
// Connect try to reconnect until Start runs again.
func (e *Embedded) Stop() {
	e.mu.Lock()
	srv := e.srv
	e.srv = nil
	e.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Shutdown stops the server for good.
func (e *Embedded) Shutdown() {
	e.Stop()
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
}

// InProcessConn implements nats.InProcessConnProvider.
func (e *Embedded) InProcessConn() (net.Conn, error) {
	e.mu.Lock()
	srv := e.srv
	e.mu.Unlock()
	if srv == nil {
		return nil, errors.New("embedded nats is stopped")
	}
	return srv.InProcessConn()
}

// ClientURL returns the nats:// URL of the listening port, or "" when the
// server serves in-process connections only.
func (e *Embedded) ClientURL() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.port == 0 {
		return ""
	}
	return fmt.Sprintf("nats://%s", net.JoinHostPort(e.opts.Host, fmt.Sprint(e.port)))
}

// Connect opens an in-process connection that reconnects forever, as the
// manager when the server requires authentication.
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{
		nats.InProcessServer(e),
		nats.Name("agent-operator"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
		nats.ReconnectJitter(0, 0),
	}
	if e.auth != nil {
		base = append(base, nats.Token(e.auth.managerToken))
	}
	nc, err := nats.Connect("", append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect embedded nats: %w", err)
	}
	return nc, nil
}

// MintReader issues a credential that reads the events of namespace (and
// nothing else) on new connections for ttl. It fails when the server was
// started without Auth.
func (e *Embedded) MintReader(namespace string, ttl time.Duration) (ReaderCredential, error) {
	if e.auth == nil {
		return ReaderCredential{}, errors.New("mint reader: the embedded server runs without authentication")
	}
	return e.auth.mint(e.opts.Stream, namespace, ttl)
}

// ConnectOptions configures a connection to an external NATS server.
type ConnectOptions struct {
	// Name is the client name shown by the server.
	Name string
	// CredsFile is a .creds file (user JWT and NKey seed).
	CredsFile string
	// NKeySeedFile is an NKey seed file, used when CredsFile is empty.
	NKeySeedFile string
	// CAFile, CertFile and KeyFile configure TLS: CAFile alone verifies the
	// server, CertFile and KeyFile add a client certificate.
	CAFile, CertFile, KeyFile string
	// ReconnectWait between reconnect attempts; default 1s. Reconnects never
	// stop.
	ReconnectWait time.Duration
	// Reader, when set, authenticates with a credential from MintReader
	// (user, password and the inbox prefix it may subscribe to).
	Reader *ReaderCredential
}

// Connect dials an external NATS server. The connection reconnects forever;
// the first dial must succeed before ctx ends.
func Connect(ctx context.Context, url string, o ConnectOptions) (*nats.Conn, error) {
	if url == "" {
		return nil, errors.New("connect nats: empty url")
	}
	if o.Name == "" {
		o.Name = "agent-operator"
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = time.Second
	}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(o.ReconnectWait),
	}
	if d, ok := ctx.Deadline(); ok {
		opts = append(opts, nats.Timeout(time.Until(d)))
	}
	switch {
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.NKeySeedFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("connect nats: read nkey seed: %w", err)
		}
		opts = append(opts, opt)
	}
	if r := o.Reader; r != nil {
		opts = append(opts, nats.UserInfo(r.User, r.Password), nats.CustomInboxPrefix(r.InboxPrefix))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.CertFile != "" || o.KeyFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect nats: %w", err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect nats %s: %w", url, err)
	}
	return nc, nil
}
