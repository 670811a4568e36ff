package kubeauth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
)

// Authorizer implements events.CallerAuthorizer with the API server.
type Authorizer struct {
	Authn authenticationclient.TokenReviewsGetter
	Authz authorizationclient.SubjectAccessReviewsGetter
	// ClientCAs verifies the client certificates of callers. When nil,
	// LoadClientCAs (if set) is tried again on each certificate caller until
	// it succeeds; without either, only bearer tokens are accepted.
	ClientCAs     *x509.CertPool
	LoadClientCAs func(context.Context) (*x509.CertPool, error)

	mu sync.Mutex
}

// New returns an Authorizer over cs with the cluster's client CA (see
// LoadClientCAs; when clientCAs is nil it is read again when needed).
func New(cs kubernetes.Interface, clientCAs *x509.CertPool) *Authorizer {
	return &Authorizer{Authn: cs.AuthenticationV1(), Authz: cs.AuthorizationV1(), ClientCAs: clientCAs,
		LoadClientCAs: func(ctx context.Context) (*x509.CertPool, error) { return LoadClientCAs(ctx, cs) }}
}

// clientCAs returns the pool, loading it when it is not known yet.
func (a *Authorizer) clientCAs(ctx context.Context) (*x509.CertPool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ClientCAs != nil || a.LoadClientCAs == nil {
		return a.ClientCAs, nil
	}
	pool, err := a.LoadClientCAs(ctx)
	if err != nil {
		return nil, err
	}
	a.ClientCAs = pool
	return pool, nil
}

// identity is the caller as the API server knows it.
type identity struct {
	user, uid string
	groups    []string
	extra     map[string]authorizationv1.ExtraValue
}

// AuthorizeRead implements events.CallerAuthorizer: the caller may read the
// events of namespace when it may get agentsessions there.
func (a *Authorizer) AuthorizeRead(ctx context.Context, r *http.Request, namespace string) (string, error) {
	id, err := a.identify(ctx, r)
	if err != nil {
		return "", err
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: id.user, UID: id.uid, Groups: id.groups, Extra: id.extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: "get", Group: agentsv1.GroupVersion.Group, Resource: "agentsessions",
		},
	}}
	res, err := a.Authz.SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return id.user, fmt.Errorf("subject access review: %w", err)
	}
	if !res.Status.Allowed {
		return id.user, fmt.Errorf("%w: %s may not get agentsessions in namespace %s, so it may not read their events",
			events.ErrForbidden, id.user, namespace)
	}
	return id.user, nil
}

// identify reads the caller from its bearer token or client certificate.
func (a *Authorizer) identify(ctx context.Context, r *http.Request) (identity, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || token == "" {
			return identity{}, fmt.Errorf("%w: the Authorization header is not a bearer token", events.ErrUnauthenticated)
		}
		tr, err := a.Authn.TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			return identity{}, fmt.Errorf("token review: %w", err)
		}
		if !tr.Status.Authenticated {
			return identity{}, fmt.Errorf("%w: the API server does not accept the token", events.ErrUnauthenticated)
		}
		u := tr.Status.User
		extra := map[string]authorizationv1.ExtraValue{}
		for k, v := range u.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		return identity{user: u.Username, uid: u.UID, groups: u.Groups, extra: extra}, nil
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cas, err := a.clientCAs(ctx)
		if err != nil || cas == nil {
			return identity{}, fmt.Errorf("%w: client certificates are not accepted (the cluster's client CA is unknown: %v): use a bearer token",
				events.ErrUnauthenticated, err)
		}
		certs := r.TLS.PeerCertificates
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: cas, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			return identity{}, fmt.Errorf("%w: client certificate: %w", events.ErrUnauthenticated, err)
		}
		subj := certs[0].Subject
		if subj.CommonName == "" {
			return identity{}, fmt.Errorf("%w: client certificate without a common name", events.ErrUnauthenticated)
		}
		return identity{user: subj.CommonName, groups: append(append([]string{}, subj.Organization...), "system:authenticated")}, nil
	}
	return identity{}, fmt.Errorf("%w: present a bearer token or a client certificate of the cluster", events.ErrUnauthenticated)
}

// ClientCAConfigMap is where the API server publishes the CA of client
// certificates: kube-system/extension-apiserver-authentication, key
// client-ca-file.
const (
	ClientCAConfigMapNamespace = "kube-system"
	ClientCAConfigMapName      = "extension-apiserver-authentication"
	ClientCAConfigMapKey       = "client-ca-file"
)

// LoadClientCAs reads the cluster's client CA bundle.
func LoadClientCAs(ctx context.Context, cs kubernetes.Interface) (*x509.CertPool, error) {
	cm, err := cs.CoreV1().ConfigMaps(ClientCAConfigMapNamespace).Get(ctx, ClientCAConfigMapName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read client CA: %w", err)
	}
	pem := cm.Data[ClientCAConfigMapKey]
	pool := x509.NewCertPool()
	if pem == "" || !pool.AppendCertsFromPEM([]byte(pem)) {
		return nil, errors.New("read client CA: no certificate in " + ClientCAConfigMapNamespace + "/" + ClientCAConfigMapName)
	}
	return pool, nil
}
