package agentsession

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

func TestEgressTargets(t *testing.T) {
	lookup := func(_ context.Context, _, host string) ([]netip.Addr, error) {
		switch host {
		case "git.example.com":
			return []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8::1")}, nil
		case "pypi.org":
			return []netip.Addr{netip.MustParseAddr("::ffff:203.0.113.5")}, nil
		}
		return nil, errors.New("no such host")
	}
	cases := []struct {
		name           string
		hosts          []string
		repo           string
		want           []string // prefix[:port]
		wantUnresolved []string
	}{
		{"cidr with host bits is masked", []string{"10.1.2.3/8"}, "", []string{"10.0.0.0/8"}, nil},
		{"ip and port", []string{"192.0.2.7:443"}, "", []string{"192.0.2.7/32:443"}, nil},
		{"name resolves to each address", []string{"git.example.com:22"}, "", []string{"198.51.100.1/32:22", "2001:db8::1/128:22"}, nil},
		{"mapped addresses are unmapped", []string{"pypi.org"}, "", []string{"203.0.113.5/32"}, nil},
		{"wildcards and unknown names allow nothing", []string{"*.example.com", "nowhere.invalid"}, "", nil, []string{"*.example.com", "nowhere.invalid"}},
		{"https git host on 443", nil, "https://git.example.com/org/app.git", []string{"198.51.100.1/32:443", "2001:db8::1/128:443"}, nil},
		{"ssh git host with a port", nil, "ssh://git@192.0.2.9:2222/org/app.git", []string{"192.0.2.9/32:2222"}, nil},
		{"scp-like git host on 22", nil, "git@192.0.2.9:org/app.git", []string{"192.0.2.9/32:22"}, nil},
		{"duplicates collapse", []string{"192.0.2.7", "192.0.2.7/32"}, "", []string{"192.0.2.7/32"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &agentsv1.AgentSession{Spec: agentsv1.AgentSessionSpec{Workspace: agentsv1.WorkspaceSpec{AllowedEgressHosts: tc.hosts}}}
			if tc.repo != "" {
				s.Spec.Workspace.Git = &agentsv1.GitSource{Repository: tc.repo}
			}
			targets, unresolved := egressTargets(t.Context(), s, lookup)
			var got []string
			for _, tg := range targets {
				got = append(got, targetString(tg))
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(unresolved, tc.wantUnresolved) {
				t.Errorf("targets %v unresolved %v, want %v %v", got, unresolved, tc.want, tc.wantUnresolved)
			}
		})
	}
}

func targetString(t egressTarget) string {
	if t.port == 0 {
		return t.prefix.String()
	}
	return t.prefix.String() + ":" + strconv.Itoa(int(t.port))
}

func TestIPBlockNeverContainsTheAPIServer(t *testing.T) {
	api := []netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("172.18.0.2"), netip.MustParseAddr("fd00::1")}
	cases := []struct {
		prefix string
		want   *networkingv1.IPBlock
	}{
		{"0.0.0.0/0", &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.96.0.1/32", "172.18.0.2/32"}}},
		{"10.96.0.0/12", &networkingv1.IPBlock{CIDR: "10.96.0.0/12", Except: []string{"10.96.0.1/32"}}},
		{"192.0.2.0/24", &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}},
		{"::/0", &networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fd00::1/128"}}},
		{"172.18.0.2/32", nil},
	}
	for _, tc := range cases {
		got := ipBlock(netip.MustParsePrefix(tc.prefix), api)
		if !equality.Semantic.DeepEqual(got, tc.want) {
			t.Errorf("ipBlock(%s) = %+v, want %+v", tc.prefix, got, tc.want)
		}
	}
}

// TestWorkspaceNetworkPolicy: the reconciler creates, before the pod, a
// NetworkPolicy owned by the session that selects its pod, denies all ingress,
// and allows egress only to DNS and the listed hosts, never to the API server.
func TestWorkspaceNetworkPolicy(t *testing.T) {
	ns := newNamespace(t)
	svc := &corev1.Service{}
	if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: "default", Name: "kubernetes"}, svc); err != nil {
		t.Fatalf("get the kubernetes service: %v", err)
	}
	apiIP := netip.MustParseAddr(svc.Spec.ClusterIP)
	wide := netip.PrefixFrom(apiIP, 16).Masked()
	s := validSession(ns)
	s.Spec.Workspace.AllowedEgressHosts = []string{wide.String(), "192.0.2.7:443", "*.example.com", apiIP.String()}
	s.Spec.Workspace.Git = &agentsv1.GitSource{Repository: "https://192.0.2.9/org/app.git"}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	pod := getPod(t, s)
	np := &networkingv1.NetworkPolicy{}
	if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: s.Name + "-ws"}, np); err != nil {
		t.Fatalf("the pod exists without its network policy: %v", err)
	}
	if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: s.Name}, s); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(np, s) {
		t.Errorf("network policy owners %+v, want controller %s", np.OwnerReferences, s.UID)
	}
	if sel := np.Spec.PodSelector.MatchLabels; len(sel) != 1 || sel[agentsv1.LabelSessionUID] != string(s.UID) || pod.Labels[agentsv1.LabelSessionUID] != string(s.UID) {
		t.Errorf("pod selector %v does not select the pod (labels %v)", sel, pod.Labels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) || len(np.Spec.Ingress) != 0 {
		t.Errorf("policy types %v ingress %+v: want both types and no ingress rule", np.Spec.PolicyTypes, np.Spec.Ingress)
	}
	if got := np.Annotations[AnnotationUnresolvedEgress]; got != "*.example.com" {
		t.Errorf("unresolved annotation %q", got)
	}

	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(p int32) *intstr.IntOrString { v := intstr.FromInt32(p); return &v }
	var except []string
	var eps []string
	for _, a := range apiAddrs(t) {
		if wide.Contains(a) {
			except = append(except, netip.PrefixFrom(a, a.BitLen()).String())
		}
		eps = append(eps, a.String())
	}
	want := []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: port(53)}, {Protocol: &tcp, Port: port(53)}}},
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: wide.String(), Except: except}}}},
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.7/32"}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(443)}}},
		// the API server's ClusterIP, listed on its own, is dropped
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.9/32"}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(443)}}},
	}
	if !equality.Semantic.DeepEqual(np.Spec.Egress, want) {
		t.Errorf("egress rules (API server addresses %v):\n got %+v\nwant %+v", eps, np.Spec.Egress, want)
	}
	if !slices.Contains(except, apiIP.String()+"/32") {
		t.Errorf("the API server's ClusterIP %s is not cut out of %s: %v", apiIP, wide, except)
	}
}

// apiAddrs reads the API server addresses the way the reconciler does.
func apiAddrs(t *testing.T) []netip.Addr {
	t.Helper()
	r := &Reconciler{Client: testClient}
	addrs, err := r.apiServerAddrs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// TestNetworkPolicyOfANewSessionIsOneRequest: on a real API server, a new
// session's NetworkPolicy is one request (a create) on its start's path,
// where reading it first (NetworkPolicies are not cached) made two. A policy
// that exists is read, and written only when it differs from the session's;
// one of that name that the session does not control is refused.
func TestNetworkPolicyOfANewSessionIsOneRequest(t *testing.T) {
	ns := newNamespace(t)
	counted, log := testenv.CountRequests(testCfg, "/networkpolicies")
	c, err := client.New(counted, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c, Scheme: scheme.Scheme}
	// Never created, so the suite's manager leaves it alone; the policy is
	// owned by its UID.
	s := validSession(ns)
	s.UID = types.UID("uid-one-request")
	key := types.NamespacedName{Namespace: ns, Name: networkPolicyName(s)}
	steps := []struct {
		name   string
		before func(t *testing.T)
		want   map[string]int
		err    bool
	}{
		{"a new session", nil, map[string]int{http.MethodPost: 1}, false},
		{"its policy exists as it should", nil, map[string]int{http.MethodPost: 1, http.MethodGet: 1}, false},
		{"its policy was changed", func(t *testing.T) {
			changePolicy(t, key, func(np *networkingv1.NetworkPolicy) { np.Spec.Egress = nil })
		}, map[string]int{http.MethodPost: 1, http.MethodGet: 1, http.MethodPut: 1}, false},
		{"a policy of its name that another owns", func(t *testing.T) {
			changePolicy(t, key, func(np *networkingv1.NetworkPolicy) { np.OwnerReferences = nil })
		}, map[string]int{http.MethodPost: 1, http.MethodGet: 1}, true},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before(t)
		}
		log.Take()
		err := r.ensureNetworkPolicy(t.Context(), s)
		if (err != nil) != st.err {
			t.Errorf("%s: error %v, want error %t", st.name, err, st.err)
		}
		if got := log.Take(); !maps.Equal(got, st.want) {
			t.Errorf("%s: requests %v, want %v", st.name, got, st.want)
		}
		np := &networkingv1.NetworkPolicy{}
		if err := testClient.Get(t.Context(), key, np); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !st.err && len(np.Spec.Egress) == 0 {
			t.Errorf("%s: the policy allows no DNS: %+v", st.name, np.Spec)
		}
	}
}

// TestWorkspacePolicyDeletedOrChangedIsRestored: a session's NetworkPolicy
// deleted, or loosened, while its pod lives is written again as the
// controller wrote it (the policies are watched), with a Warning Event.
// Before, it was ensured only when the pod was created.
func TestWorkspacePolicyDeletedOrChangedIsRestored(t *testing.T) {
	ns := newNamespace(t)
	s := validSession(ns)
	s.Spec.Workspace.AllowedEgressHosts = []string{"192.0.2.7:443"}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	getPod(t, s)
	key := types.NamespacedName{Namespace: ns, Name: networkPolicyName(s)}
	first := &networkingv1.NetworkPolicy{}
	if err := testClient.Get(t.Context(), key, first); err != nil {
		t.Fatalf("the pod exists without its network policy: %v", err)
	}

	if err := testClient.Delete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted policy written again", func() error {
		np := &networkingv1.NetworkPolicy{}
		if err := testClient.Get(t.Context(), key, np); err != nil {
			return err
		}
		if np.UID == first.UID {
			return errors.New("still the deleted policy")
		}
		if !equality.Semantic.DeepEqual(np.Spec, first.Spec) {
			return fmt.Errorf("spec %+v, want %+v", np.Spec, first.Spec)
		}
		return nil
	})
	waitWarning(t, ns, first.OwnerReferences[0].UID, ReasonNetworkPolicyRestored)

	// An egress rule without peers or ports allows everything.
	changePolicy(t, key, func(np *networkingv1.NetworkPolicy) {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{})
	})
	eventually(t, "the loosened policy written back", func() error {
		np := &networkingv1.NetworkPolicy{}
		if err := testClient.Get(t.Context(), key, np); err != nil {
			return err
		}
		if !equality.Semantic.DeepEqual(np.Spec, first.Spec) {
			return fmt.Errorf("egress %+v, want %+v", np.Spec.Egress, first.Spec.Egress)
		}
		return nil
	})
}

// TestKeptNetworkPolicyInPlaceCostsNoRequest: keeping the policy, which
// runs on every reconcile of a session with a pod, reads it from the cache:
// no request while it is as written (its hash survives the API server's
// round trip), a write once it was deleted or changed (a deleted one is
// read live first: the cache may only not have seen it yet).
func TestKeptNetworkPolicyInPlaceCostsNoRequest(t *testing.T) {
	ns := newNamespace(t)
	counted, log := testenv.CountRequests(testCfg, "/networkpolicies")
	informers, err := cache.New(counted, cache.Options{Scheme: scheme.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(t.Context()) }()
	c, err := client.New(counted, client.Options{Scheme: scheme.Scheme, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		t.Fatal(err)
	}
	live, err := client.New(counted, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c, APIReader: live, Scheme: scheme.Scheme, Recorder: suiteRecorder}
	// Never created, so the suite's manager leaves it alone.
	s := validSession(ns)
	s.UID = types.UID("uid-kept")
	key := types.NamespacedName{Namespace: ns, Name: networkPolicyName(s)}
	if err := r.ensureNetworkPolicy(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	cached := func(what string, ok func(*networkingv1.NetworkPolicy, error) bool) {
		t.Helper()
		eventually(t, what, func() error {
			np := &networkingv1.NetworkPolicy{}
			if err := c.Get(t.Context(), key, np); !ok(np, err) {
				return fmt.Errorf("not yet (%v)", err)
			}
			return nil
		})
	}
	cached("the cache holds the policy", func(_ *networkingv1.NetworkPolicy, err error) bool { return err == nil })
	steps := []struct {
		name   string
		before func(t *testing.T)
		want   map[string]int
	}{
		{"in place", nil, map[string]int{}},
		{"changed", func(t *testing.T) {
			changePolicy(t, key, func(np *networkingv1.NetworkPolicy) { np.Spec.Egress = nil })
			cached("the cache sees the change", func(np *networkingv1.NetworkPolicy, err error) bool { return err == nil && len(np.Spec.Egress) == 0 })
		}, map[string]int{http.MethodPost: 1, http.MethodGet: 1, http.MethodPut: 1}},
		{"in place again", func(t *testing.T) {
			cached("the cache sees the restore", func(np *networkingv1.NetworkPolicy, err error) bool { return err == nil && len(np.Spec.Egress) > 0 })
		}, map[string]int{}},
		{"deleted", func(t *testing.T) {
			if err := testClient.Delete(t.Context(), &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}); err != nil {
				t.Fatal(err)
			}
			cached("the cache sees the delete", func(_ *networkingv1.NetworkPolicy, err error) bool { return apierrors.IsNotFound(err) })
		}, map[string]int{http.MethodGet: 1, http.MethodPost: 1}},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before(t)
		}
		log.Take()
		if err := r.keepNetworkPolicy(t.Context(), s); err != nil {
			t.Errorf("%s: %v", st.name, err)
		}
		if got := log.Take(); !maps.Equal(got, st.want) {
			t.Errorf("%s: requests %v, want %v", st.name, got, st.want)
		}
		np := &networkingv1.NetworkPolicy{}
		if err := live.Get(t.Context(), key, np); err != nil || len(np.Spec.Egress) == 0 {
			t.Errorf("%s: policy %+v, %v: want it with its DNS rule", st.name, np.Spec, err)
		}
	}
}

// changePolicy changes the stored policy of key, as someone else would.
func changePolicy(t *testing.T, key types.NamespacedName, change func(*networkingv1.NetworkPolicy)) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		np := &networkingv1.NetworkPolicy{}
		if err := testClient.Get(t.Context(), key, np); err != nil {
			return err
		}
		change(np)
		return testClient.Update(t.Context(), np)
	}); err != nil {
		t.Fatalf("change policy %s: %v", key, err)
	}
}

// TestEgressTargetsResolveSideBySide: a name whose DNS never answers does
// not use up the time of the names after it; they are looked up side by side
// within one budget. Before, the lookups ran one after another under one
// timeout, so every name listed after a black-holed one stayed blocked.
func TestEgressTargetsResolveSideBySide(t *testing.T) {
	lookup := func(ctx context.Context, _, host string) ([]netip.Addr, error) {
		if host == "blackhole.example" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return []netip.Addr{netip.MustParseAddr("198.51.100.7")}, nil
	}
	s := &agentsv1.AgentSession{Spec: agentsv1.AgentSessionSpec{Workspace: agentsv1.WorkspaceSpec{
		AllowedEgressHosts: []string{"blackhole.example", "git.example.com:443"}}}}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	targets, unresolved := egressTargets(ctx, s, lookup)
	var got []string
	for _, tg := range targets {
		got = append(got, targetString(tg))
	}
	if !slices.Equal(got, []string{"198.51.100.7/32:443"}) || !slices.Equal(unresolved, []string{"blackhole.example"}) {
		t.Errorf("targets %v unresolved %v, want [198.51.100.7/32:443] [blackhole.example]", got, unresolved)
	}
}

// waitWarning waits for a Warning Event of reason about the object uid.
func waitWarning(t *testing.T, ns string, uid types.UID, reason string) {
	t.Helper()
	eventually(t, "a Warning Event "+reason, func() error {
		var list eventsv1.EventList
		if err := testClient.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.UID == uid && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("no %s Event", reason)
	})
}
