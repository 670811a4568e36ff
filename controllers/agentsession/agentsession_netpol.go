package agentsession

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// The workspace NetworkPolicy.
//
// Every workspace pod gets a NetworkPolicy, owned by its session and created
// before the pod, that denies all ingress and all egress except DNS (UDP and
// TCP 53 to pods in kube-system) and spec.workspace.allowedEgressHosts.
// NetworkPolicy matches addresses, not names, so the entries become ipBlocks:
//   - an IPv4 address or CIDR is used as it is;
//   - a host name (and the host of spec.workspace.git.repository, which the
//     clone init container needs) is resolved by the manager when it creates
//     the pod, and each address found is allowed; the policy is not refreshed
//     afterwards (only written again when it was deleted or changed, see
//     keepNetworkPolicy), so a host whose addresses change may become
//     unreachable;
//   - a *.domain entry or a name that does not resolve allows nothing; such
//     entries are listed in the annotation AnnotationUnresolvedEgress.
//
// The Kubernetes API server is never reachable: the ClusterIPs of the
// default/kubernetes Service and its endpoint addresses are cut out of every
// ipBlock (an entry that is exactly one of them is dropped).
//
// Enforcement needs a CNI plugin that implements NetworkPolicy (Calico,
// Cilium, kindnet, ...); the plain CNI bridge of the local cluster does not.

// AnnotationUnresolvedEgress lists, comma-separated, the allowedEgressHosts
// entries the NetworkPolicy could not turn into addresses.
const AnnotationUnresolvedEgress = "agent-operator.dev/unresolved-egress-hosts"

// resolveTimeout bounds the name lookups of one NetworkPolicy.
const resolveTimeout = 5 * time.Second

// egressTarget is one allowed destination: a prefix and optionally a TCP port.
type egressTarget struct {
	prefix netip.Prefix
	port   int32 // 0: every port and protocol
}

// networkPolicyName is the name of the session's NetworkPolicy (that of its pod).
func networkPolicyName(s *agentsv1.AgentSession) string { return s.Name + podNameSuffix }

// ensureNetworkPolicy creates (or updates) the NetworkPolicy confining the
// session's workspace pod. Children in a shared workspace use their parent's.
func (r *Reconciler) ensureNetworkPolicy(ctx context.Context, s *agentsv1.AgentSession) error {
	_, err := r.writeNetworkPolicy(ctx, s)
	return err
}

// readPolicy reads the NetworkPolicy of s's pod from the cache and, when the
// cache has none, once from the API server: the cache may not have seen a
// policy created a moment ago (one read, not the names resolved and a create
// refused).
func (r *Reconciler) readPolicy(ctx context.Context, s *agentsv1.AgentSession) (*networkingv1.NetworkPolicy, error) {
	got := &networkingv1.NetworkPolicy{}
	key := types.NamespacedName{Namespace: s.Namespace, Name: networkPolicyName(s)}
	err := r.Client.Get(ctx, key, got)
	if apierrors.IsNotFound(err) {
		err = r.liveReader().Get(ctx, key, got)
	}
	return got, err
}

// keepNetworkPolicy keeps the NetworkPolicy of a session whose pod is alive
// as the controller wrote it, on every reconcile: read from the cache (the
// operator's policies are watched), so a policy in place costs no request.
// One that was deleted, or whose spec no longer has the hash it was written
// with, is written again and a Warning Event says so.
func (r *Reconciler) keepNetworkPolicy(ctx context.Context, s *agentsv1.AgentSession) error {
	if sharedWorkspace(s) {
		return nil
	}
	got, err := r.readPolicy(ctx, s)
	switch {
	case err == nil && policyIntact(got, s):
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("get network policy: %w", err)
	}
	wrote, err := r.writeNetworkPolicy(ctx, s)
	if err != nil {
		return err
	}
	if wrote { // not when only the cache had not seen the policy yet
		ctrl.LoggerFrom(ctx).Info("Restored workspace network policy", "networkPolicy", networkPolicyName(s))
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, ReasonNetworkPolicyRestored, "RestoreNetworkPolicy",
			"Workspace network policy %s was deleted or changed while its pod ran; written again", networkPolicyName(s))
	}
	return nil
}

// ReasonNetworkPolicyRestored is the Event reason of a workspace
// NetworkPolicy written again after it was deleted or changed.
const ReasonNetworkPolicyRestored = "NetworkPolicyRestored"

// AnnotationPolicyHash holds the hash of the spec the controller wrote to a
// workspace NetworkPolicy; a spec that no longer matches it was changed by
// someone else.
const AnnotationPolicyHash = "agent-operator.dev/policy-hash"

// policyIntact reports whether np is controlled by s and has the spec the
// controller wrote to it.
func policyIntact(np *networkingv1.NetworkPolicy, s *agentsv1.AgentSession) bool {
	ref := metav1.GetControllerOf(np)
	return ref != nil && ref.UID == s.UID && np.Annotations[AnnotationPolicyHash] == policyHash(np.Spec)
}

// policyHash is a short hash of spec's JSON form.
func policyHash(spec networkingv1.NetworkPolicySpec) string {
	b, err := json.Marshal(spec)
	if err != nil {
		return "" // a spec always marshals; "" matches no annotation written
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// writeNetworkPolicy creates the session's NetworkPolicy, or updates the
// one that exists when it differs from the session's; wrote says whether it
// wrote.
func (r *Reconciler) writeNetworkPolicy(ctx context.Context, s *agentsv1.AgentSession) (wrote bool, err error) {
	if sharedWorkspace(s) {
		return false, nil
	}
	targets, unresolved := egressTargets(ctx, s, net.DefaultResolver.LookupNetIP)
	var api []netip.Addr
	if len(targets) > 0 {
		if api, err = r.apiServerAddrs(ctx); err != nil {
			return false, err
		}
	}
	want := buildNetworkPolicy(s, targets, unresolved, api)
	if err := ctrl.SetControllerReference(s, want, r.Scheme); err != nil {
		return false, fmt.Errorf("own network policy: %w", err)
	}
	log := ctrl.LoggerFrom(ctx)
	if len(unresolved) > 0 {
		log.Info("Some allowed egress hosts resolve to no address and stay blocked", "hosts", unresolved)
	}
	// A new session's policy does not exist yet: create it, one request on
	// every start's path. Only a policy that exists is read (live: the cache
	// holds only the operator's policies and may lag) and compared.
	err = r.Client.Create(ctx, want)
	if err == nil {
		log.Info("Created workspace network policy", "networkPolicy", klog.KObj(want))
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("create network policy: %w", err)
	}
	got := &networkingv1.NetworkPolicy{}
	if err := r.liveReader().Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
		return false, fmt.Errorf("get network policy: %w", err)
	}
	if ref := metav1.GetControllerOf(got); ref == nil || ref.UID != s.UID {
		return false, reconcile.TerminalError(fmt.Errorf("network policy %s exists and is not controlled by session %s", got.Name, s.Name))
	}
	if equality.Semantic.DeepEqual(got.Spec, want.Spec) && equality.Semantic.DeepEqual(got.Annotations, want.Annotations) {
		return false, nil
	}
	got.Spec, got.Annotations = want.Spec, want.Annotations
	if err := r.Client.Update(ctx, got); err != nil {
		return false, fmt.Errorf("update network policy: %w", err)
	}
	return true, nil
}

// apiServerAddrs returns the addresses of the Kubernetes API server as seen
// from pods: the ClusterIPs of default/kubernetes and its endpoints.
func (r *Reconciler) apiServerAddrs(ctx context.Context) ([]netip.Addr, error) {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, svc); err != nil {
		return nil, fmt.Errorf("get the kubernetes service (its addresses are excluded from workspace egress): %w", err)
	}
	for _, ip := range append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...) {
		add(ip)
	}
	var eps discoveryv1.EndpointSliceList
	if err := r.Client.List(ctx, &eps, client.InNamespace(metav1.NamespaceDefault),
		client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		return nil, fmt.Errorf("list the kubernetes endpoints (they are excluded from workspace egress): %w", err)
	}
	for _, es := range eps.Items {
		for _, ep := range es.Endpoints {
			for _, a := range ep.Addresses {
				add(a)
			}
		}
	}
	return out, nil
}

// lookupFunc resolves a host name (net.Resolver.LookupNetIP).
type lookupFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// egressTargets turns spec.workspace.allowedEgressHosts (and the git host)
// into prefixes, resolving names with lookup. Entries that give no address
// are returned as unresolved.
func egressTargets(ctx context.Context, s *agentsv1.AgentSession, lookup lookupFunc) ([]egressTarget, []string) {
	entries := slices.Clone(s.Spec.Workspace.AllowedEgressHosts)
	if g := s.Spec.Workspace.Git; g != nil {
		if h := gitHost(g.Repository); h != "" {
			entries = append(entries, h)
		}
	}
	resolved := resolveAll(ctx, entries, lookup)
	var targets []egressTarget
	var unresolved []string
	for _, e := range entries {
		host, port := splitHostPort(e)
		var prefixes []netip.Prefix
		switch {
		case strings.Contains(host, "/"):
			if p, err := netip.ParsePrefix(host); err == nil {
				prefixes = append(prefixes, p.Masked())
			}
		case strings.HasPrefix(host, "*."):
			// A wildcard names no address.
		default:
			if a, err := netip.ParseAddr(host); err == nil {
				prefixes = append(prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			} else {
				for _, a := range resolved[host] {
					prefixes = append(prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				}
			}
		}
		if len(prefixes) == 0 {
			unresolved = append(unresolved, e)
		}
		for _, p := range prefixes {
			t := egressTarget{prefix: p, port: port}
			if !slices.Contains(targets, t) {
				targets = append(targets, t)
			}
		}
	}
	return targets, unresolved
}

// resolveConcurrency bounds the name lookups of one NetworkPolicy that run
// at once.
const resolveConcurrency = 8

// resolveAll looks up the host names among entries side by side, all within
// resolveTimeout: a name whose DNS never answers costs the reconcile that
// timeout once, not once per name, and does not use up the others' time.
// Names that fail are missing from the result.
func resolveAll(ctx context.Context, entries []string, lookup lookupFunc) map[string][]netip.Addr {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	var names []string
	for _, e := range entries {
		host, _ := splitHostPort(e)
		if strings.Contains(host, "/") || strings.HasPrefix(host, "*.") || slices.Contains(names, host) {
			continue
		}
		if _, err := netip.ParseAddr(host); err == nil {
			continue
		}
		names = append(names, host)
	}
	out := make(map[string][]netip.Addr, len(names))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, resolveConcurrency)
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if addrs, err := lookup(ctx, "ip", name); err == nil {
				mu.Lock()
				out[name] = addrs
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// splitHostPort splits "host[:port]"; a missing or bad port is 0.
func splitHostPort(e string) (string, int32) {
	i := strings.LastIndexByte(e, ':')
	if i < 0 {
		return e, 0
	}
	p, err := strconv.ParseInt(e[i+1:], 10, 32)
	if err != nil || p < 1 || p > 65535 {
		return e[:i], 0
	}
	return e[:i], int32(p)
}

// gitHost returns "host:port" of a repository URL (https, http, ssh or
// user@host:path), or "" when there is none.
func gitHost(repo string) string {
	if m := strings.Index(repo, "://"); m < 0 {
		at, colon := strings.IndexByte(repo, '@'), strings.IndexByte(repo, ':')
		if at < 0 || colon < at {
			return ""
		}
		return strings.ToLower(repo[at+1:colon]) + ":22"
	}
	u, err := url.Parse(repo)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80", "ssh": "22"}[u.Scheme]
	}
	if port == "" {
		return strings.ToLower(u.Hostname())
	}
	return strings.ToLower(u.Hostname()) + ":" + port
}

// buildNetworkPolicy returns the NetworkPolicy of s: its workspace pod (by
// session UID) may receive nothing and send only DNS and to targets, minus
// the API server's addresses.
func buildNetworkPolicy(s *agentsv1.AgentSession, targets []egressTarget, unresolved []string, api []netip.Addr) *networkingv1.NetworkPolicy {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	egress := []networkingv1.NetworkPolicyEgressRule{{
		To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{corev1.LabelMetadataName: metav1.NamespaceSystem},
		}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
	}}
	for _, t := range targets {
		block := ipBlock(t.prefix, api)
		if block == nil {
			continue // the target is the API server itself
		}
		rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: block}}}
		if t.port != 0 {
			p := intstr.FromInt32(t.port)
			rule.Ports = []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
		}
		egress = append(egress, rule)
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: networkPolicyName(s), Namespace: s.Namespace, Labels: sessionLabels(s)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{agentsv1.LabelSessionUID: string(s.UID)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     nil, // none: nothing may connect to the workspace
			Egress:      egress,
		},
	}
	np.Annotations = map[string]string{AnnotationPolicyHash: policyHash(np.Spec)}
	if len(unresolved) > 0 {
		np.Annotations[AnnotationUnresolvedEgress] = strings.Join(unresolved, ",")
	}
	return np
}

// ipBlock allows p except the api addresses inside it; nil when p is a
// single address of the API server.
func ipBlock(p netip.Prefix, api []netip.Addr) *networkingv1.IPBlock {
	block := &networkingv1.IPBlock{CIDR: p.String()}
	for _, a := range api {
		if !p.Contains(a) {
			continue
		}
		if p.Bits() == a.BitLen() {
			return nil
		}
		block.Except = append(block.Except, netip.PrefixFrom(a, a.BitLen()).String())
	}
	return block
}
