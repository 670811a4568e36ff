package claim

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
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
	return sessionNamed(t, c, "s1")
}

func sessionNamed(t *testing.T, c client.Client, name string) *agentsv1.AgentSession {
	t.Helper()
	s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
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
	// Releasing a claim someone else took changes nothing; the holder's
	// release frees it and keeps the Lease (and its count of transitions).
	if err := second.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h, _ := a.Holding(t.Context(), s.Namespace, s.UID); h == nil || h.Holder != b.Me {
		t.Fatalf("after a stale release: holder %+v, want %s", h, b.Me)
	}
	if err := third.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: s.Namespace, Name: Name(s.UID)}, l); err != nil {
		t.Fatalf("after release: %v, want the Lease kept", err)
	}
	if l.Spec.HolderIdentity != nil || l.Spec.RenewTime != nil || ptr.Deref(l.Spec.LeaseTransitions, -1) != third.Fence {
		t.Errorf("released Lease spec %+v, want no holder, no renewal, transitions %d", l.Spec, third.Fence)
	}
	for _, who := range []*Claims{a, b} {
		if h, err := who.Holding(t.Context(), s.Namespace, s.UID); err != nil || h != nil {
			t.Errorf("Holding of a released claim seen by %s = %+v, %v; want free", who.Me, h, err)
		}
	}
}

// Fences (the executor's epochs) only grow: across a release and a new
// acquisition by anyone, and across a takeover after expiry; a holder that
// re-acquires its own live claim keeps its fence.
func TestClaimEpochsOnlyGrow(t *testing.T) {
	c := apiClient(t)
	type step struct {
		who     string        // "a", "b" (another install) or "a2" (another replica of a's install)
		release bool          // release who's last claim instead of acquiring
		advance time.Duration // move the clock first
		fence   int32         // the fence an acquisition must return
		foreign bool          // the acquisition must find another install's live claim
		floor   int32         // acquire with this floor (AcquireFrom)
		del     bool          // delete the Lease by hand instead of acquiring
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"created at 0", []step{{who: "a", fence: 0}}},
		{"released, then another install", []step{{who: "a", fence: 0}, {who: "a", release: true}, {who: "b", fence: 1},
			{who: "b", release: true}, {who: "a", fence: 2}}},
		{"released, then the same instance", []step{{who: "a", fence: 0}, {who: "a", release: true}, {who: "a", fence: 1},
			{who: "a", release: true}, {who: "a", fence: 2}}},
		{"re-acquiring a live claim of one's own keeps the fence", []step{{who: "a", fence: 0}, {who: "a", advance: 5 * time.Second, fence: 0}}},
		{"takeover after expiry", []step{{who: "a", fence: 0}, {who: "b", advance: 16 * time.Second, fence: 1},
			{who: "a", advance: 16 * time.Second, fence: 2}}},
		{"a stale release frees nothing", []step{{who: "a", fence: 0}, {who: "b", advance: 16 * time.Second, fence: 1},
			{who: "a", release: true}, {who: "a", foreign: true}, {who: "b", release: true}, {who: "a", fence: 2},
			{who: "a", release: true}, {who: "a2", fence: 3}}},
		{"a Lease deleted by hand is made anew at the floor", []step{{who: "a", fence: 0}, {who: "a", release: true},
			{who: "a", fence: 1}, {del: true}, {who: "a", floor: 2, fence: 2}, {who: "a", fence: 2}}},
		{"a floor lifts one's own live claim", []step{{who: "a", fence: 0}, {who: "a", floor: 5, fence: 5}, {who: "a", fence: 5}}},
		{"a floor below the count changes nothing", []step{{who: "a", fence: 0}, {who: "a", release: true}, {who: "b", fence: 1},
			{who: "b", release: true}, {who: "a", floor: 1, fence: 2}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sessionNamed(t, c, fmt.Sprintf("epochs-%d", i))
			now := time.Now()
			clock := func() time.Time { return now }
			who := map[string]*Claims{
				"a":  {Client: c, Reader: c, Me: Holder{Install: "ns-a/ao", Pod: "ao-1"}, Duration: 15 * time.Second, Now: clock},
				"a2": {Client: c, Reader: c, Me: Holder{Install: "ns-a/ao", Pod: "ao-2"}, Duration: 15 * time.Second, Now: clock},
				"b":  {Client: c, Reader: c, Me: Holder{Install: "ns-b/ao", Pod: "ao-9"}, Duration: 15 * time.Second, Now: clock},
			}
			last := map[string]*Claim{}
			for n, st := range tt.steps {
				now = now.Add(st.advance)
				if st.release {
					if err := last[st.who].Release(t.Context()); err != nil {
						t.Fatalf("step %d: release by %s: %v", n, st.who, err)
					}
					continue
				}
				if st.del {
					l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: Name(s.UID)}}
					if err := c.Delete(t.Context(), l); err != nil {
						t.Fatalf("step %d: delete the Lease: %v", n, err)
					}
					continue
				}
				cl, err := who[st.who].AcquireFrom(t.Context(), s, st.floor)
				var f *Foreign
				if st.foreign {
					if !errors.As(err, &f) {
						t.Fatalf("step %d: acquire by %s = %v, want Foreign", n, st.who, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: acquire by %s: %v", n, st.who, err)
				}
				if cl.Fence != st.fence {
					t.Fatalf("step %d: %s acquired fence %d, want %d", n, st.who, cl.Fence, st.fence)
				}
				// Every acquisition, even of one's own claim (a restarted
				// process of the same pod), is stamped: takeover times are
				// measured from it.
				l := &coordinationv1.Lease{}
				if err := c.Get(t.Context(), client.ObjectKey{Namespace: s.Namespace, Name: Name(s.UID)}, l); err != nil {
					t.Fatal(err)
				}
				if l.Spec.AcquireTime == nil || !l.Spec.AcquireTime.Equal(&metav1.MicroTime{Time: now.Truncate(time.Microsecond)}) {
					t.Fatalf("step %d: acquireTime = %v, want the time of %s's acquisition %v", n, l.Spec.AcquireTime, st.who, now)
				}
				last[st.who] = cl
			}
		})
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

// With sharding the replicas of one install drive sessions side by side: a
// live claim of another replica of the same install holds like another
// install's (Acquire and Holding say who, Mine says whose), and is taken once
// it expired or was released.
func TestShardedClaimsHoldAgainstOtherReplicasOfTheInstall(t *testing.T) {
	c := apiClient(t)
	type step struct {
		who     string        // "a1", "a2" (replicas of one install, sharded) or "legacy" (a2 without sharding)
		release bool          // release who's last claim instead of acquiring
		advance time.Duration // move the clock first
		foreign string        // the acquisition must find this holder's live claim ("": it succeeds)
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a live claim of another replica holds", []step{{who: "a1"}, {who: "a2", foreign: "a1"}}},
		{"and holds until it expires", []step{{who: "a1"}, {who: "a2", advance: 14 * time.Second, foreign: "a1"},
			{who: "a2", advance: 2 * time.Second}, {who: "a1", foreign: "a2"}}},
		{"a released claim is taken at once", []step{{who: "a1"}, {who: "a1", release: true}, {who: "a2"}}},
		{"without sharding another replica's claim is taken at once", []step{{who: "a1"}, {who: "legacy"}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sessionNamed(t, c, fmt.Sprintf("sharded-%d", i))
			now := time.Now()
			clock := func() time.Time { return now }
			who := map[string]*Claims{
				"a1":     {Client: c, Reader: c, Me: Holder{Install: "ns-a/ao", Pod: "ao-1"}, Duration: 15 * time.Second, Now: clock, Sharded: true},
				"a2":     {Client: c, Reader: c, Me: Holder{Install: "ns-a/ao", Pod: "ao-2"}, Duration: 15 * time.Second, Now: clock, Sharded: true},
				"legacy": {Client: c, Reader: c, Me: Holder{Install: "ns-a/ao", Pod: "ao-2"}, Duration: 15 * time.Second, Now: clock},
			}
			last := map[string]*Claim{}
			for n, st := range tt.steps {
				now = now.Add(st.advance)
				if st.release {
					if err := last[st.who].Release(t.Context()); err != nil {
						t.Fatalf("step %d: release by %s: %v", n, st.who, err)
					}
					continue
				}
				cl, err := who[st.who].Acquire(t.Context(), s)
				if st.foreign != "" {
					var f *Foreign
					if !errors.As(err, &f) || f.Holder != who[st.foreign].Me {
						t.Fatalf("step %d: acquire by %s = %v, want Foreign held by %s", n, st.who, err, who[st.foreign].Me)
					}
					h, err := who[st.who].Holding(t.Context(), s.Namespace, s.UID)
					if err != nil || h == nil || h.Holder != who[st.foreign].Me {
						t.Fatalf("step %d: Holding seen by %s = %+v, %v; want %s", n, st.who, h, err, who[st.foreign].Me)
					}
					for name, want := range map[string]bool{st.who: false, st.foreign: true} {
						if mine, err := who[name].Mine(t.Context(), s.Namespace, s.UID); err != nil || mine != want {
							t.Fatalf("step %d: Mine by %s = %t, %v; want %t", n, name, mine, err, want)
						}
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: acquire by %s: %v", n, st.who, err)
				}
				if mine, err := who[st.who].Mine(t.Context(), s.Namespace, s.UID); err != nil || !mine {
					t.Fatalf("step %d: Mine by the new holder %s = %t, %v; want true", n, st.who, mine, err)
				}
				last[st.who] = cl
			}
		})
	}
}

// The first claim of a session no instance has driven (no status.owner) is
// one request, a create, where it was a read that found nothing and then the
// create. A session whose Lease exists although its status names no owner
// (its driver crashed before the owner was written) is still taken as an
// existing claim: a new epoch, never a second Lease.
func TestFirstClaimIsOneRequest(t *testing.T) {
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := errors.Join(agentsv1.AddToScheme(scheme), coordinationv1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	counted, log := testenv.CountRequests(cfg, "")
	c, err := client.New(counted, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	me := Holder{Install: "ns-a/ao", Pod: "ao-1"}
	claims := &Claims{Client: c, Reader: c, Me: me, Duration: 15 * time.Second}

	s := sessionNamed(t, c, "first-claim")
	log.Take()
	first, err := claims.Acquire(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if got := log.Take(); !maps.Equal(got, map[string]int{http.MethodPost: 1}) {
		t.Errorf("first claim of a session never driven: requests %v, want one POST", got)
	}
	if err := first.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	// Its driver released it (or crashed) before status named it: the
	// create finds the Lease, which is read and taken with a new epoch.
	log.Take()
	again, err := claims.Acquire(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fence != first.Fence+1 {
		t.Errorf("claim of an existing Lease without an owner in status: fence %d, want %d", again.Fence, first.Fence+1)
	}
	if got := log.Take(); !maps.Equal(got, map[string]int{http.MethodPost: 1, http.MethodGet: 1, http.MethodPut: 1}) {
		t.Errorf("claim of an existing Lease without an owner in status: requests %v, want POST (exists), GET, PUT", got)
	}
	if err := again.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	// Status names its last driver: read first, no create.
	s.Status.Owner = me.String()
	log.Take()
	third, err := claims.Acquire(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if got := log.Take(); !maps.Equal(got, map[string]int{http.MethodGet: 1, http.MethodPut: 1}) || third.Fence != again.Fence+1 {
		t.Errorf("claim of a session driven before: requests %v, fence %d; want GET and PUT, fence %d", got, third.Fence, again.Fence+1)
	}
}

// Behind says whether this instance's live claim counts below (or, under
// another holder, equal to) a driver a workspace saw: only then was its
// Lease made anew. A claim another instance holds, or none, is not behind.
func TestBehind(t *testing.T) {
	c := apiClient(t)
	a := &Claims{Client: c, Reader: c, Me: Holder{Install: "ns-a/ao", Pod: "ao-1"}}
	b := &Claims{Client: c, Reader: c, Me: Holder{Install: "ns-b/ao", Pod: "ao-9"}}
	tests := []struct {
		name   string
		holder *Claims // who acquires the claim first (nil: nobody)
		floor  int32   // at this count
		seen   string  // the driver the workspace saw
		epoch  int64
		want   bool
	}{
		{"mine at 0, an earlier pod seen at 5", a, 0, "ns-a/ao/ao-0", 5, true},
		{"mine at 0, myself seen at 5", a, 0, "ns-a/ao/ao-1", 5, true},
		{"mine at 5, another holder seen at 5", a, 5, "ns-a/ao/ao-0", 5, true},
		{"mine at 5, myself seen at 5", a, 5, "ns-a/ao/ao-1", 5, false},
		{"mine at 6, another seen at 5", a, 6, "ns-b/ao/ao-9", 5, false},
		{"another install's live claim at 0, it seen at 4", b, 0, "ns-b/ao/ao-9", 4, false},
		{"no claim", nil, 0, "ns-b/ao/ao-9", 4, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sessionNamed(t, c, fmt.Sprintf("behind-%d", i))
			if tt.holder != nil {
				if _, err := tt.holder.AcquireFrom(t.Context(), s, tt.floor); err != nil {
					t.Fatal(err)
				}
			}
			got, err := a.Behind(t.Context(), s.Namespace, s.UID, tt.seen, tt.epoch)
			if err != nil || got != tt.want {
				t.Errorf("Behind = %t, %v; want %t", got, err, tt.want)
			}
		})
	}
}
