package claim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// DefaultDuration is how long a claim lasts without renewal.
const DefaultDuration = 15 * time.Second

// LabelClaim marks the Leases of this package (the manager caches only those).
const LabelClaim = "agent-operator.dev/session-claim"

// Name is the name of the Lease claiming the session with uid.
func Name(uid types.UID) string { return "agentsession-" + string(uid) }

// Holder identifies an operator instance: its install (the release, shared by
// its replicas) and its pod.
type Holder struct {
	Install string
	Pod     string
}

// String is the Lease's holderIdentity, "<install>/<pod>".
func (h Holder) String() string { return h.Install + "/" + h.Pod }

// ParseHolder reads a holderIdentity written by String.
func ParseHolder(s string) Holder {
	i := strings.LastIndex(s, "/")
	if i < 0 {
		return Holder{Pod: s}
	}
	return Holder{Install: s[:i], Pod: s[i+1:]}
}

// Claims acquires and renews the claims of one instance.
type Claims struct {
	// Client writes Leases; Reader reads them (the API server, so that a
	// claim is decided on fresh data).
	Client client.Client
	Reader client.Reader
	// Me is this instance.
	Me Holder
	// Duration is how long a claim lasts without renewal (DefaultDuration).
	Duration time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
	// Sharded says the replicas of this install drive sessions side by side
	// (the manager's --shard-sessions): a live claim of another replica of
	// this install then holds like another install's. Without it only one
	// replica (the elected leader) drives, so another replica's claim is
	// taken over at once: that replica is gone.
	Sharded bool
}

func (c *Claims) duration() time.Duration {
	if c.Duration > 0 {
		return c.Duration
	}
	return DefaultDuration
}

func (c *Claims) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Foreign is returned by Acquire when another instance holds a live claim.
type Foreign struct {
	Holder Holder
	// Until is when the claim expires unless its holder renews it.
	Until time.Time
}

func (f *Foreign) Error() string {
	return fmt.Sprintf("the session is driven by operator instance %s (claim valid until %s)", f.Holder, f.Until.UTC().Format(time.RFC3339))
}

// Claim is a claim this instance holds.
type Claim struct {
	c     *Claims
	lease *coordinationv1.Lease
	// Fence increases with every change of holder (the Lease's
	// transitions), including every acquisition of a released claim, and
	// never goes back: the Lease lives as long as the session (Release
	// keeps it), so its transitions are never counted from 0 again (a
	// Lease deleted by hand is made anew from 0: AcquireFrom). The
	// executor refuses a driver whose fence is older than one it has seen
	// (executor.Owner.Epoch).
	Fence int32
}

// Acquire claims s for this instance: it creates the Lease, renews its own,
// or takes over one that expired or that another replica of this install
// held (unless Sharded: only one replica of an install drives sessions, so
// that one is gone). Another instance's live claim is returned as a
// *Foreign error.
func (c *Claims) Acquire(ctx context.Context, s *agentsv1.AgentSession) (*Claim, error) {
	return c.AcquireFrom(ctx, s, 0)
}

// AcquireFrom is Acquire with a floor for the claim's fence: the Lease's
// transitions are set to at least floor. A workspace that saw this very
// instance drive the session at a later epoch than its Lease says (the
// Lease was deleted and made anew, counting from 0 again) refuses it until
// its fence is past that epoch (see "Superseded drivers" in
// docs/security.md).
func (c *Claims) AcquireFrom(ctx context.Context, s *agentsv1.AgentSession, floor int32) (*Claim, error) {
	key := types.NamespacedName{Namespace: s.Namespace, Name: Name(s.UID)}
	if s.Status.Owner == "" {
		// A session no instance has driven yet (no owner in its status) has
		// no Lease as a rule: create it without reading first. One that
		// exists anyway (an owner not yet written) is read and taken below.
		if cl, err := c.create(ctx, s, c.now(), floor); !apierrors.IsAlreadyExists(err) {
			return cl, err
		}
	}
	for range 5 {
		now := c.now()
		l := &coordinationv1.Lease{}
		err := c.Reader.Get(ctx, key, l)
		if apierrors.IsNotFound(err) {
			cl, err := c.create(ctx, s, now, floor)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return cl, err
		}
		if err != nil {
			return nil, fmt.Errorf("read claim: %w", err)
		}
		holder := ParseHolder(ptr.Deref(l.Spec.HolderIdentity, ""))
		if f := c.foreign(l, holder, now); f != nil {
			return nil, f
		}
		if holder != c.Me { // also a released claim (no holder): every new holding is a new epoch
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		}
		if ptr.Deref(l.Spec.LeaseTransitions, 0) < floor {
			l.Spec.LeaseTransitions = ptr.To(floor)
		}
		// Every acquisition is stamped, also of this holder's own claim (a
		// process of the same pod restarted after a crash takes its sessions
		// back without a new epoch): takeover times are measured from it.
		l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
		l.Spec.HolderIdentity = ptr.To(c.Me.String())
		l.Spec.RenewTime = &metav1.MicroTime{Time: now}
		l.Spec.LeaseDurationSeconds = ptr.To(int32(c.duration() / time.Second))
		if err := c.Client.Update(ctx, l); err != nil {
			if apierrors.IsConflict(err) {
				continue // someone else wrote it meanwhile: look again
			}
			return nil, fmt.Errorf("take claim: %w", err)
		}
		return &Claim{c: c, lease: l, Fence: ptr.Deref(l.Spec.LeaseTransitions, 0)}, nil
	}
	return nil, errors.New("claim: the Lease kept changing; try again")
}

// create creates the session's Lease, held by this instance from now. Its
// error is an AlreadyExists one when the Lease exists.
func (c *Claims) create(ctx context.Context, s *agentsv1.AgentSession, now time.Time, floor int32) (*Claim, error) {
	l := c.newLease(s, now)
	l.Spec.LeaseTransitions = ptr.To(max(floor, 0))
	if err := c.Client.Create(ctx, l); err != nil {
		return nil, fmt.Errorf("create claim: %w", err)
	}
	return &Claim{c: c, lease: l, Fence: ptr.Deref(l.Spec.LeaseTransitions, 0)}, nil
}

// Holding returns the instance holding a live claim on the session with uid
// in namespace, when it is not this instance; nil otherwise.
func (c *Claims) Holding(ctx context.Context, namespace string, uid types.UID) (*Foreign, error) {
	l, err := c.read(ctx, namespace, uid)
	if err != nil || l == nil {
		return nil, err
	}
	return c.foreign(l, ParseHolder(ptr.Deref(l.Spec.HolderIdentity, "")), c.now()), nil
}

// Mine reports whether this instance holds a live claim on the session with
// uid in namespace.
func (c *Claims) Mine(ctx context.Context, namespace string, uid types.UID) (bool, error) {
	l, err := c.read(ctx, namespace, uid)
	if err != nil || l == nil {
		return false, err
	}
	return c.heldByMe(l), nil
}

// read reads the claim Lease of the session with uid in namespace (nil
// when there is none).
func (c *Claims) read(ctx context.Context, namespace string, uid types.UID) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := c.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: Name(uid)}, l)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read claim: %w", err)
	}
	return l, nil
}

// heldByMe reports whether l is this instance's live claim.
func (c *Claims) heldByMe(l *coordinationv1.Lease) bool {
	if ptr.Deref(l.Spec.HolderIdentity, "") != c.Me.String() || l.Spec.RenewTime == nil {
		return false
	}
	until := l.Spec.RenewTime.Add(time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second)
	return c.now().Before(until)
}

// Behind reports whether this instance holds a live claim on the session
// with uid in namespace whose count is below a driver a workspace saw,
// holder at epoch (or equal to it under another holder). Counts only grow
// on one Lease, so its Lease was made anew since (deleted by hand, it
// counts from 0 again), and AcquireFrom must take it past epoch. A claim
// this instance does not hold (another driver really took it) is not
// behind: that driver is waited for.
func (c *Claims) Behind(ctx context.Context, namespace string, uid types.UID, holder string, epoch int64) (bool, error) {
	l, err := c.read(ctx, namespace, uid)
	if err != nil || l == nil {
		return false, err
	}
	if !c.heldByMe(l) {
		return false, nil
	}
	n := int64(ptr.Deref(l.Spec.LeaseTransitions, 0))
	return n < epoch || n == epoch && holder != c.Me.String(), nil
}

// foreign returns the live claim of another instance in l, or nil.
func (c *Claims) foreign(l *coordinationv1.Lease, holder Holder, now time.Time) *Foreign {
	if holder == c.Me || holder.Pod == "" {
		return nil
	}
	if holder.Install == c.Me.Install && !c.Sharded {
		return nil // another replica of this install: leader election says it is gone
	}
	if l.Spec.RenewTime == nil {
		return nil
	}
	until := l.Spec.RenewTime.Add(time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second)
	if !now.Before(until) {
		return nil // expired
	}
	return &Foreign{Holder: holder, Until: until}
}

func (c *Claims) newLease(s *agentsv1.AgentSession, now time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: Name(s.UID), Namespace: s.Namespace,
			Labels: map[string]string{LabelClaim: "true", agentsv1.LabelSession: s.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: agentsv1.GroupVersion.String(), Kind: "AgentSession", Name: s.Name, UID: s.UID,
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(c.Me.String()),
			LeaseDurationSeconds: ptr.To(int32(c.duration() / time.Second)),
			AcquireTime:          &metav1.MicroTime{Time: now},
			RenewTime:            &metav1.MicroTime{Time: now},
			LeaseTransitions:     ptr.To[int32](0),
		},
	}
}

// Keep renews the claim every third of its duration until ctx ends, and
// calls lost (once) and returns when another instance took it (or the Lease
// is gone). A renewal that fails because the API server cannot be reached
// is retried at the next tick: while the API server is down nobody can take
// the claim, and the first renewal after it is back tells whether someone
// did (see docs/design.md for the window this leaves until issue 21's
// fencing closes it).
func (cl *Claim) Keep(ctx context.Context, lost func(error), failed func(error)) {
	tick := time.NewTicker(cl.c.duration() / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := cl.renew(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, errTaken):
			lost(err)
			return
		default:
			if failed != nil {
				failed(err)
			}
		}
	}
}

var errTaken = errors.New("the claim was taken by another instance")

func (cl *Claim) renew(ctx context.Context) error {
	l := cl.lease.DeepCopy()
	l.Spec.RenewTime = &metav1.MicroTime{Time: cl.c.now()}
	err := cl.c.Client.Update(ctx, l)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		fresh := &coordinationv1.Lease{}
		if gerr := cl.c.Reader.Get(ctx, client.ObjectKeyFromObject(l), fresh); gerr != nil {
			if apierrors.IsNotFound(gerr) {
				return fmt.Errorf("renew claim: %w (the Lease is gone)", errTaken)
			}
			return fmt.Errorf("renew claim: %w", errors.Join(err, gerr))
		}
		if ptr.Deref(fresh.Spec.HolderIdentity, "") != cl.c.Me.String() {
			return fmt.Errorf("renew claim: %w (now %s)", errTaken, ptr.Deref(fresh.Spec.HolderIdentity, ""))
		}
		fresh.Spec.RenewTime = &metav1.MicroTime{Time: cl.c.now()}
		if err := cl.c.Client.Update(ctx, fresh); err != nil {
			return fmt.Errorf("renew claim: %w", err)
		}
		cl.lease = fresh
		return nil
	}
	if err != nil {
		return fmt.Errorf("renew claim: %w", err)
	}
	cl.lease = l
	return nil
}

// Release gives the claim up, so another instance may drive the session at
// once (when it is still this instance's): it clears the Lease's holder and
// renewal time, only if this instance still holds it. The Lease itself
// stays (its ownerReference lets the garbage collector delete it with the
// session), so that the next holder's fence counts on from this one's: a
// Lease created anew would start its transitions at 0 again.
func (cl *Claim) Release(ctx context.Context) error {
	l := cl.lease.DeepCopy()
	for range 5 {
		if ptr.Deref(l.Spec.HolderIdentity, "") != cl.c.Me.String() {
			return nil // taken since: nothing of ours to release
		}
		l.Spec.HolderIdentity = nil
		l.Spec.RenewTime = nil
		err := cl.c.Client.Update(ctx, l) // with l's resourceVersion: refused if the Lease changed
		switch {
		case err == nil:
			cl.lease = l
			return nil
		case apierrors.IsNotFound(err):
			return nil // gone with the session
		case !apierrors.IsConflict(err):
			return fmt.Errorf("release claim: %w", err)
		}
		fresh := &coordinationv1.Lease{}
		if err := cl.c.Reader.Get(ctx, client.ObjectKeyFromObject(l), fresh); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("release claim: %w", err)
		}
		l = fresh
	}
	return errors.New("release claim: the Lease kept changing; it expires by itself")
}
