package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// CredentialsPath is where CredentialHandler serves reader credentials:
// GET CredentialsPath?namespace=NS returns a ReaderCredential as JSON.
const CredentialsPath = "/v1/nats/reader-credentials"

// DefaultReaderTTL is how long a minted reader credential opens new
// connections (an open connection lives on).
const DefaultReaderTTL = 15 * time.Minute

// ErrUnauthenticated and ErrForbidden are returned by a CallerAuthorizer for
// a caller it cannot identify and one that may not read the namespace.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
)

// CallerAuthorizer identifies the caller of r and decides whether it may read
// the events of namespace (the manager asks Kubernetes: TokenReview or the
// client certificate, then a SubjectAccessReview). It returns the caller's
// name for the log.
type CallerAuthorizer interface {
	AuthorizeRead(ctx context.Context, r *http.Request, namespace string) (string, error)
}

// ReaderMinter issues reader credentials (Embedded.MintReader).
type ReaderMinter interface {
	MintReader(namespace string, ttl time.Duration) (ReaderCredential, error)
}

// CredentialHandler serves reader credentials at CredentialsPath to callers
// auth allows, each valid for ttl (DefaultReaderTTL when 0). audit, when
// set, is told of every decision (never the credential).
func CredentialHandler(m ReaderMinter, auth CallerAuthorizer, ttl time.Duration, audit func(caller, namespace string, err error)) http.Handler {
	if ttl <= 0 {
		ttl = DefaultReaderTTL
	}
	if audit == nil {
		audit = func(string, string, error) {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+CredentialsPath, func(w http.ResponseWriter, r *http.Request) {
		ns := r.URL.Query().Get("namespace")
		if err := validateName(ns, false); err != nil {
			http.Error(w, fmt.Sprintf("namespace %q: %v", ns, err), http.StatusBadRequest)
			return
		}
		caller, err := auth.AuthorizeRead(r.Context(), r, ns)
		audit(caller, ns, err)
		switch {
		case errors.Is(err, ErrUnauthenticated):
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		case errors.Is(err, ErrForbidden):
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		case err != nil:
			http.Error(w, "authorize: "+err.Error(), http.StatusInternalServerError)
			return
		}
		cred, err := m.MintReader(ns, ttl)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(cred)
	})
	return mux
}
