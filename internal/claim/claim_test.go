package claim

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

func apiClient(t *testing.T) client.Client {
	t.Helper()
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := errors.Join(agentsv1.AddToScheme(scheme), coordinationv1.AddToScheme(scheme), corev1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func session(t *testing.T, c client.Client) *agentsv1.AgentSession {
	t.Helper()
	s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s1"},
		Spec: agentsv1.AgentSessionSpec{Prompt: "p", Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "m",
			ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "x"}}}}
	if err := c.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Two installs share a cluster: the first to claim a session drives it, the
// other is told who does and for how long; a replica of the same install, and
// anyone once the claim expired, takes it over, and each change of holder
// raises the fence.
func TestClaimsKeepOneDriverPerSession(t *testing.T) {
	c := apiClient(t)
	s := session(t, c)
	now := time.Now()
	clock := func() time.Time { return now }
	a := &Claims{Client: c, Reader: c, Me: Holder{Install: "ns-a/ao", Pod: "ao-1"}, Duration: 15 * time.Second, Now: clock}
	b := &Claims{Client: c, Reader: c, Me: Holder{Install: "ns-b/ao", Pod: "ao-9"}, Duration: 15 * time.Second, Now: clock}
	a2 := &Claims{Client: c, Reader: c, Me: Holder{Install: "ns-a/ao", Pod: "ao-2"}, Duration: 15 * time.Second, Now: clock}

	first, err := a.Acquire(t.Context(), s)
	if err != nil {
		t.Fatalf("first claim: %v", err)
	}
	var f *Foreign
	if _, err := b.Acquire(t.Context(), s); !errors.As(err, &f) || f.Holder != a.Me {
		t.Fatalf("another install's claim = %v, want Foreign held by %s", err, a.Me)
	}
	if h, err := b.Holding(t.Context(), s.Namespace, s.UID); err != nil || h == nil || h.Holder != a.Me {
		t.Fatalf("Holding seen by the other install = %+v, %v", h, err)
	}
	if h, _ := a.Holding(t.Context(), s.Namespace, s.UID); h != nil {
		t.Fatalf("Holding seen by the holder = %+v, want nil", h)
	}
	// The lease is owned by the session, so deleting the session deletes it.
	l := &coordinationv1.Lease{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: s.Namespace, Name: Name(s.UID)}, l); err != nil {
		t.Fatal(err)
	}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != s.UID {
		t.Errorf("owner references %+v", l.OwnerReferences)
	}

	// A new replica of the same install (the old leader is gone) takes over at once.
	second, err := a2.Acquire(t.Context(), s)
	if err != nil || second.Fence != first.Fence+1 {
		t.Fatalf("same install's new replica: %v (fence %v after %d)", err, second, first.Fence)
	}
	// The other install waits for the claim to expire, then takes it.
	now = now.Add(14 * time.Second)
	if _, err := b.Acquire(t.Context(), s); !errors.As(err, &f) {
		t.Fatalf("before expiry: %v, want Foreign", err)
	}
	now = now.Add(2 * time.Second)
	third, err := b.Acquire(t.Context(), s)
	if err != nil || third.Fence != second.Fence+1 {
		t.Fatalf("after expiry: %v (fence %+v)", err, third)
	}
	// The old holder's renewal finds the claim taken.
	if err := second.renew(t.Context()); !errors.Is(err, errTaken) {
		t.Fatalf("renewal by the old holder = %v, want taken", err)
	}
	// Releasing a claim someone else took deletes nothing; the holder's release frees it.
	if err := second.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h, _ := a.Holding(t.Context(), s.Namespace, s.UID); h == nil || h.Holder != b.Me {
		t.Fatalf("after a stale release: holder %+v, want %s", h, b.Me)
	}
	if err := third.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: s.Namespace, Name: Name(s.UID)}, l); !apierrors.IsNotFound(err) {
		t.Fatalf("after release: %v, want the Lease gone", err)
	}
}

// Keep reports a claim taken by another instance (after the holder could not
// renew in time, e.g. it was paused) and stops renewing.
func TestKeepReportsALostClaim(t *testing.T) {
	c := apiClient(t)
	s := session(t, c)
	a := &Claims{Client: c, Reader: c, Me: Holder{Install: "ns-a/ao", Pod: "ao-1"}, Duration: 3 * time.Second}
	cl, err := a.Acquire(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	// Another install takes the Lease as if it had expired.
	l := &coordinationv1.Lease{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: s.Namespace, Name: Name(s.UID)}, l); err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("ns-b/ao/ao-9")
	if err := c.Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	lost := make(chan error, 1)
	go cl.Keep(t.Context(), func(err error) { lost <- err }, nil)
	select {
	case err := <-lost:
		if !errors.Is(err, errTaken) {
			t.Fatalf("lost with %v, want taken", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Keep did not report the lost claim")
	}
}
