package kubeauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

var (
	env *envtest.Environment
	cs  kubernetes.Interface
)

func TestMain(m *testing.M) {
	e, cfg, err := testenv.Start(filepath.Join("..", "..", "..", "config", "crd", "bases"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env = e
	cs = kubernetes.NewForConfigOrDie(cfg)
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// caller is how one test client calls the endpoint.
type caller struct {
	name  string
	token string
	cert  *tls.Certificate
}

// TestCredentialEndpointAsksKubernetes: the endpoint gives a reader
// credential for a namespace only to callers Kubernetes authenticates and
// allows to get AgentSessions there (a ServiceAccount token, a client
// certificate of the cluster), and the credential reads that namespace.
func TestCredentialEndpointAsksKubernetes(t *testing.T) {
	ctx := t.Context()
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// reader may get agentsessions in team-a; the user alice (a client
	// certificate) too, through her group.
	mustCreate(t, func() error {
		_, err := cs.RbacV1().Roles("team-a").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "session-viewer"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"agent-operator.dev"}, Resources: []string{"agentsessions"}, Verbs: []string{"get"}}}},
			metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := cs.RbacV1().RoleBindings("team-a").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "session-viewers"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "session-viewer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team-a", Name: "reader"},
				{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "team-a-devs"}}}, metav1.CreateOptions{})
		return err
	})
	for _, sa := range []string{"reader", "stranger"} {
		mustCreate(t, func() error {
			_, err := cs.CoreV1().ServiceAccounts("team-a").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
			return err
		})
	}
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts("team-a").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	alice, err := env.AddUser(envtest.User{Name: "alice", Groups: []string{"team-a-devs"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	aliceCert, err := tls.X509KeyPair(alice.Config().CertData, alice.Config().KeyData)
	if err != nil {
		t.Fatal(err)
	}
	foreign := selfSignedClientCert(t, "alice")

	if _, err := LoadClientCAs(ctx, cs); err != nil {
		t.Fatal(err)
	}
	srv := eventsServer(t)
	// No pool yet: the Authorizer loads the cluster's client CA when a
	// certificate caller comes (as the manager does when it could not at start).
	ts := httptest.NewUnstartedServer(events.CredentialHandler(srv, New(cs, nil), time.Minute, nil))
	ts.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	ts.StartTLS()
	t.Cleanup(ts.Close)

	tests := []struct {
		caller caller
		ns     string
		want   int
	}{
		{caller{name: "service account token", token: token("reader")}, "team-a", http.StatusOK},
		{caller{name: "service account token", token: token("reader")}, "team-b", http.StatusForbidden},
		{caller{name: "unbound service account", token: token("stranger")}, "team-a", http.StatusForbidden},
		{caller{name: "cluster client certificate", cert: &aliceCert}, "team-a", http.StatusOK},
		{caller{name: "cluster client certificate", cert: &aliceCert}, "team-b", http.StatusForbidden},
		{caller{name: "certificate of another CA", cert: foreign}, "team-a", http.StatusUnauthorized},
		{caller{name: "invalid token", token: "not-a-token"}, "team-a", http.StatusUnauthorized},
		{caller{name: "no credentials"}, "team-a", http.StatusUnauthorized},
		{caller{name: "service account token", token: token("reader")}, "team-a.>", http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s for %s", tt.caller.name, tt.ns), func(t *testing.T) {
			resp := call(t, ts, tt.caller, tt.ns)
			defer resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.want)
			}
			if tt.want != http.StatusOK {
				return
			}
			var cred events.ReaderCredential
			if err := json.NewDecoder(resp.Body).Decode(&cred); err != nil {
				t.Fatal(err)
			}
			if cred.Namespace != tt.ns || cred.User == "" || cred.Password == "" {
				t.Fatalf("credential %+v", cred)
			}
			nc, err := events.Connect(t.Context(), srv.ClientURL(), events.ConnectOptions{Reader: &cred})
			if err != nil {
				t.Fatalf("the minted credential does not connect: %v", err)
			}
			nc.Close()
		})
	}
}

func mustCreate(t *testing.T, create func() error) {
	t.Helper()
	if err := create(); err != nil {
		t.Fatal(err)
	}
}

// eventsServer is an embedded NATS server requiring authentication.
func eventsServer(t *testing.T) *events.Embedded {
	t.Helper()
	srv, err := events.StartEmbedded(t.Context(), events.EmbeddedOptions{StoreDir: t.TempDir(), Port: -1, Auth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func call(t *testing.T, ts *httptest.Server, c caller, ns string) *http.Response {
	t.Helper()
	tr := ts.Client().Transport.(*http.Transport).Clone()
	if c.cert != nil {
		tr.TLSClientConfig.Certificates = []tls.Certificate{*c.cert}
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+events.CredentialsPath+"?namespace="+ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// selfSignedClientCert is a client certificate for user that no cluster CA
// signed.
func selfSignedClientCert(t *testing.T, user string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: user, Organization: []string{"system:masters"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
