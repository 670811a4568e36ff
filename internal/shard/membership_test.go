package shard

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInstallLabelIsAValidLabelValue(t *testing.T) {
	tests := []struct {
		install, want string
	}{
		{"agent-operator/agent-operator", "agent-operator.agent-operator"},
		{"agent-operator", "agent-operator"},
		{"ns/a-release-name-that-is-long-enough-to-go-past-sixty-three-characters", ""},
		{"ns/rel:odd", ""},
	}
	for _, tt := range tests {
		t.Run(tt.install, func(t *testing.T) {
			got := InstallLabel(tt.install)
			if !validLabelValue(got) {
				t.Fatalf("InstallLabel(%q) = %q, not a valid label value", tt.install, got)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("InstallLabel(%q) = %q, want %q", tt.install, got, tt.want)
			}
			if tt.want == "" && got == InstallLabel(tt.install+"x") {
				t.Errorf("InstallLabel of two installs is %q for both", got)
			}
		})
	}
}

// Replicas see each other once their Leases exist; one that stops renewing
// leaves the others' rings after its duration, one that shuts down cleanly
// leaves at once; another install's replicas are never members.
func TestMembershipFollowsTheLiveReplicas(t *testing.T) {
	c := apiClient(t)
	ctx := t.Context()
	now := time.Now()
	clock := func() time.Time { return now }
	changes := map[string][][]string{}
	member := func(install, pod string) *Membership {
		return &Membership{Client: c, Reader: c, Namespace: "default", Install: install, Pod: pod,
			Duration: 15 * time.Second, Now: clock, Log: logr.Discard(),
			OnChange: func(r Ring) { changes[pod] = append(changes[pod], r.Members()) }}
	}
	a, b := member("ns/ao", "ao-a"), member("ns/ao", "ao-b")
	other := member("ns/other", "other-x")

	if got := a.Ring(); got.Len() != 0 || a.Preferred("k") != "" {
		t.Fatalf("ring before the first list = %v, want empty", got.Members())
	}
	a.Tick(ctx)
	b.Tick(ctx)
	other.Tick(ctx)
	a.Tick(ctx)
	for _, m := range []*Membership{a, b} {
		if got := m.Ring().Members(); !slices.Equal(got, []string{"ao-a", "ao-b"}) {
			t.Fatalf("%s sees %v, want [ao-a ao-b]", m.Pod, got)
		}
	}
	if got := other.Ring().Members(); !slices.Equal(got, []string{"other-x"}) {
		t.Fatalf("another install sees %v, want only itself", got)
	}
	if want := [][]string{{"ao-a"}, {"ao-a", "ao-b"}}; !slices.EqualFunc(changes["ao-a"], want, slices.Equal[[]string]) {
		t.Fatalf("changes seen by ao-a = %v, want %v", changes["ao-a"], want)
	}

	// ao-a stops renewing (paused, partitioned): after its duration ao-b drops it.
	now = now.Add(10 * time.Second)
	b.Tick(ctx)
	if got := b.Ring().Members(); !slices.Equal(got, []string{"ao-a", "ao-b"}) {
		t.Fatalf("within ao-a's duration ao-b sees %v, want both", got)
	}
	now = now.Add(6 * time.Second)
	b.Tick(ctx)
	if got := b.Ring().Members(); !slices.Equal(got, []string{"ao-b"}) {
		t.Fatalf("after ao-a's duration ao-b sees %v, want [ao-b]", got)
	}
	// Back again, it is a member again.
	a.Tick(ctx)
	b.Tick(ctx)
	if got := b.Ring().Members(); !slices.Equal(got, []string{"ao-a", "ao-b"}) {
		t.Fatalf("after ao-a renewed ao-b sees %v, want both", got)
	}
	n := len(changes["ao-b"])

	// A clean shutdown deletes the Lease: ao-b drops ao-a at its next tick.
	stopped, stop := context.WithCancel(ctx)
	stop()
	if err := a.Start(stopped); err != nil {
		t.Fatal(err)
	}
	err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: LeaseName("ns/ao", "ao-a")}, &coordinationv1.Lease{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("ao-a's Lease after shutdown: %v, want deleted", err)
	}
	b.Tick(ctx)
	if got := b.Ring().Members(); !slices.Equal(got, []string{"ao-b"}) {
		t.Fatalf("after ao-a shut down ao-b sees %v, want [ao-b]", got)
	}
	if len(changes["ao-b"]) != n+1 {
		t.Errorf("ao-b saw %d changes after ao-a left, want 1", len(changes["ao-b"])-n)
	}
}

// Where the API server cannot be reached, the last view stands.
func TestMembershipKeepsTheLastViewWhenTheAPIServerFails(t *testing.T) {
	c := apiClient(t)
	a := &Membership{Client: c, Reader: c, Namespace: "default", Install: "ns/ao", Pod: "ao-a", Log: logr.Discard()}
	b := &Membership{Client: c, Reader: c, Namespace: "default", Install: "ns/ao", Pod: "ao-b", Log: logr.Discard()}
	a.Tick(t.Context())
	b.Tick(t.Context())
	down := &Membership{Client: c, Reader: failingReader{}, Namespace: "default", Install: "ns/ao", Pod: "ao-b", Log: logr.Discard()}
	down.ring, down.known = b.Ring(), true
	down.Tick(t.Context())
	if got := down.Ring().Members(); !slices.Equal(got, []string{"ao-a", "ao-b"}) {
		t.Fatalf("with the API server failing the ring is %v, want the last view [ao-a ao-b]", got)
	}
}

type failingReader struct{}

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("connection refused")
}

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("connection refused")
}
