package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/kubeauth"
)

// readerCredentials serves events.CredentialHandler over HTTPS on addr: the
// caller's bearer token (TokenReview) or client certificate (the cluster's
// client CA) identifies it, a SubjectAccessReview decides. The server
// certificate is self-signed at start; kubectl agent reaches the endpoint
// through a port-forward to this pod (docs/security.md).
func readerCredentials(addr string, srv *events.Embedded, cfg *rest.Config, ttl time.Duration, log logr.Logger) manager.Runnable {
	return runnable(func(ctx context.Context) error {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("reader credentials: %w", err)
		}
		cas, err := kubeauth.LoadClientCAs(ctx, cs)
		if err != nil {
			log.Info("Client certificates are not accepted, bearer tokens only", "reason", err.Error())
		}
		cert, err := selfSignedServerCert()
		if err != nil {
			return fmt.Errorf("reader credentials: %w", err)
		}
		audit := func(caller, ns string, err error) {
			if err != nil {
				log.Info("Refused a reader credential", "caller", caller, "namespace", ns, "reason", err.Error())
				return
			}
			log.Info("Issued a reader credential", "caller", caller, "namespace", ns, "ttl", ttl)
		}
		hs := &http.Server{
			Addr:              addr,
			Handler:           events.CredentialHandler(srv, kubeauth.New(cs, cas), ttl, audit),
			TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12},
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return ctx },
		}
		done := make(chan error, 1)
		go func() { done <- hs.ListenAndServeTLS("", "") }()
		select {
		case err := <-done:
			return fmt.Errorf("reader credentials on %s: %w", addr, err)
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("stop reader credentials: %w", err)
			}
			return nil
		}
	})
}

// runnable is a manager.Runnable that runs on every replica (the embedded
// server has one), leader or not.
type runnable func(context.Context) error

func (r runnable) Start(ctx context.Context) error { return r(ctx) }
func (runnable) NeedLeaderElection() bool          { return false }

// selfSignedServerCert makes the endpoint's certificate, valid for a year.
func selfSignedServerCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "agent-operator-reader-credentials"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Minute), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
