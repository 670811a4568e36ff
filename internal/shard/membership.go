package shard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultDuration is how long a replica stays a member without renewing its
// Lease (the manager's --replica-lease-duration).
const DefaultDuration = 15 * time.Second

// LabelReplicaOf marks the membership Leases of an install; its value is
// InstallLabel of the install.
const LabelReplicaOf = "agent-operator.dev/replica-of"

// InstallLabel is the value of LabelReplicaOf for install (an install id
// such as "namespace/release"): the id with '/' as '.', or a hash of it when
// that is not a valid label value.
func InstallLabel(install string) string {
	v := strings.ReplaceAll(install, "/", ".")
	if validLabelValue(v) {
		return v
	}
	sum := sha256.Sum256([]byte(install))
	return "h-" + hex.EncodeToString(sum[:16])
}

func validLabelValue(v string) bool {
	if v == "" || len(v) > 63 {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := range len(v) {
		if c := v[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return alnum(v[0]) && alnum(v[len(v)-1])
}

// LeaseName is the name of pod's membership Lease in install:
// "<release>-replica-<pod>", the release being the install id's last
// '/'-separated part.
func LeaseName(install, pod string) string {
	release := install[strings.LastIndex(install, "/")+1:]
	return release + "-replica-" + pod
}

// Membership keeps this replica's membership Lease and the Ring of the
// install's live members. It is a manager Runnable that runs on every
// replica (it needs no leader election).
//
// Where the API server cannot be reached, the last view stands: renewals
// and lists fail and are retried at the next tick, the ring does not change
// (so no replica starts or drops sessions because of the outage), and the
// other replicas, which cannot list either, keep theirs. A replica whose
// renewals fail longer than Duration while the others can still list drops
// out of their rings; its sessions move only once their claims expired
// (internal/claim), and the journal's fence stops its writes.
type Membership struct {
	// Client writes this replica's Lease; Reader lists the members (the API
	// server rather than a cache, so a view is never older than a tick).
	Client client.Client
	Reader client.Reader
	// Namespace holds the Leases (the release namespace).
	Namespace string
	// Install is the install id shared by the replicas; Pod is this replica.
	Install string
	Pod     string
	// Duration is how long a Lease lasts without renewal (DefaultDuration);
	// it is renewed, and the members listed, every third of it.
	Duration time.Duration
	// OnChange, if set, is called with the new ring whenever the members
	// change (and with the first one listed).
	OnChange func(Ring)
	// Log reports failed renewals and lists.
	Log logr.Logger
	// Now is the clock (time.Now).
	Now func() time.Time

	mu    sync.RWMutex
	ring  Ring
	known bool // a list succeeded: ring is a view, not the empty start
	lease *coordinationv1.Lease
}

func (m *Membership) duration() time.Duration {
	if m.Duration > 0 {
		return m.Duration
	}
	return DefaultDuration
}

func (m *Membership) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Ring is the current view of the members: empty until the first list
// succeeded, then always holding this replica.
func (m *Membership) Ring() Ring {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.ring
}

// Preferred is the member of the current ring that key belongs to ("" before
// the first list succeeded).
func (m *Membership) Preferred(key string) string { return m.Ring().Preferred(key) }

// NeedLeaderElection is false: every replica announces itself.
func (m *Membership) NeedLeaderElection() bool { return false }

// Start renews the Lease and refreshes the ring every third of Duration
// until ctx ends, then deletes the Lease (a clean shutdown leaves the ring at
// once instead of after Duration).
func (m *Membership) Start(ctx context.Context) error {
	if m.Client == nil || m.Reader == nil || m.Namespace == "" || m.Install == "" || m.Pod == "" {
		return errors.New("shard membership: client, reader, namespace, install and pod are required")
	}
	tick := time.NewTicker(m.duration() / 3)
	defer tick.Stop()
	for {
		m.Tick(ctx)
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := m.leave(dctx); err != nil {
				m.Log.Info("Could not delete the replica's membership Lease; it expires by itself", "reason", err.Error())
			}
			return nil
		case <-tick.C:
		}
	}
}

// Tick renews the Lease and refreshes the ring once; failures are logged and
// leave the last view as it was.
func (m *Membership) Tick(ctx context.Context) {
	if err := m.renew(ctx); err != nil && ctx.Err() == nil {
		m.Log.Info("Could not renew the replica's membership Lease; trying again", "reason", err.Error())
	}
	if err := m.refresh(ctx); err != nil && ctx.Err() == nil {
		m.Log.Info("Could not list the install's replicas; keeping the last view", "reason", err.Error())
	}
}

func (m *Membership) renew(ctx context.Context) error {
	now := metav1.MicroTime{Time: m.now()}
	key := types.NamespacedName{Namespace: m.Namespace, Name: LeaseName(m.Install, m.Pod)}
	if m.lease == nil {
		l := &coordinationv1.Lease{}
		err := m.Reader.Get(ctx, key, l)
		switch {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
					Labels: map[string]string{LabelReplicaOf: InstallLabel(m.Install)}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(m.Pod), AcquireTime: &now, RenewTime: &now,
					LeaseDurationSeconds: ptr.To(int32(m.duration() / time.Second))},
			}
			if err := m.Client.Create(ctx, l); err != nil {
				return fmt.Errorf("create membership lease: %w", err)
			}
			m.lease = l
			return nil
		case err != nil:
			return fmt.Errorf("read membership lease: %w", err)
		}
		m.lease = l
	}
	l := m.lease.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(m.Pod)
	l.Spec.RenewTime = &now
	l.Spec.LeaseDurationSeconds = ptr.To(int32(m.duration() / time.Second))
	if err := m.Client.Update(ctx, l); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			m.lease = nil // read it again at the next tick
		}
		return fmt.Errorf("renew membership lease: %w", err)
	}
	m.lease = l
	return nil
}

func (m *Membership) refresh(ctx context.Context) error {
	var list coordinationv1.LeaseList
	if err := m.Reader.List(ctx, &list, client.InNamespace(m.Namespace),
		client.MatchingLabels{LabelReplicaOf: InstallLabel(m.Install)}); err != nil {
		return fmt.Errorf("list membership leases: %w", err)
	}
	now := m.now()
	members := []string{m.Pod} // alive by definition in its own view
	for _, l := range list.Items {
		if live(&l, now) {
			members = append(members, ptr.Deref(l.Spec.HolderIdentity, ""))
		}
	}
	ring := NewRing(members...)
	m.mu.Lock()
	changed := !m.known || !ring.Equal(m.ring)
	m.ring, m.known = ring, true
	m.mu.Unlock()
	if changed {
		m.Log.Info("Replicas of the install changed", "members", ring.Members())
		if m.OnChange != nil {
			m.OnChange(ring)
		}
	}
	return nil
}

// live reports whether l was renewed within its duration at now.
func live(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || ptr.Deref(l.Spec.HolderIdentity, "") == "" {
		return false
	}
	return now.Before(l.Spec.RenewTime.Add(time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second))
}

// leave deletes this replica's Lease, if it is still the one it wrote.
func (m *Membership) leave(ctx context.Context) error {
	if m.lease == nil {
		return nil
	}
	err := m.Client.Delete(ctx, m.lease, client.Preconditions{UID: ptr.To(m.lease.UID)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete membership lease: %w", err)
	}
	return nil
}
