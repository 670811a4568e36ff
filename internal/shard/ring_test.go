package shard

import (
	"fmt"
	"slices"
	"testing"
)

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("7d3c1e2a-%04d-4b8e-9f00-%012d", i, i*7919)
	}
	return out
}

func TestNewRingSortsAndDropsDuplicates(t *testing.T) {
	tests := []struct {
		name    string
		members []string
		want    []string
	}{
		{"empty", nil, []string{}},
		{"sorted", []string{"c", "a", "b"}, []string{"a", "b", "c"}},
		{"duplicates and empty names dropped", []string{"b", "", "a", "b"}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRing(tt.members...)
			if got := r.Members(); !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("members = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPreferredIsOneOfTheMembersWhateverTheirOrder(t *testing.T) {
	tests := []struct {
		name    string
		members []string
	}{
		{"one member", []string{"ao-1"}},
		{"three members", []string{"ao-1", "ao-2", "ao-3"}},
		{"three members listed in another order", []string{"ao-3", "ao-1", "ao-2"}},
	}
	ref := NewRing("ao-1", "ao-2", "ao-3")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRing(tt.members...)
			for _, k := range keys(50) {
				p := r.Preferred(k)
				if !r.Has(p) {
					t.Fatalf("Preferred(%s) = %q, not a member of %v", k, p, r.Members())
				}
				if r.Len() == 3 && p != ref.Preferred(k) {
					t.Fatalf("Preferred(%s) = %q with members %v, %q with %v", k, p, tt.members, ref.Preferred(k), ref.Members())
				}
			}
		})
	}
	if p := (Ring{}).Preferred("k"); p != "" {
		t.Errorf("empty ring prefers %q, want none", p)
	}
}

// The documented balance (docs/design.md, "Replicas"): 300 keys over 3
// members give each between 20% and 47% of them.
func TestPreferredSpreadsKeysWithinTheDocumentedSlack(t *testing.T) {
	tests := []struct {
		name    string
		members []string
	}{
		{"pods of a deployment", []string{"agent-operator-7c9f8d5b6-x2k4q", "agent-operator-7c9f8d5b6-m8n1z", "agent-operator-7c9f8d5b6-p0r7t"}},
		{"numbered replicas", []string{"ao-0", "ao-1", "ao-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRing(tt.members...)
			ks := keys(300)
			count := map[string]int{}
			for _, k := range ks {
				count[r.Preferred(k)]++
			}
			for _, m := range tt.members {
				if share := float64(count[m]) / float64(len(ks)); share < 0.20 || share > 0.47 {
					t.Errorf("member %s has %d of %d keys (%.0f%%), want 20%%..47%%", m, count[m], len(ks), share*100)
				}
			}
		})
	}
}

// A member that leaves moves only its own keys; one that joins takes keys
// only from the others (never moves a key between two old members).
func TestMembershipChangesMoveOnlyTheChangedMembersKeys(t *testing.T) {
	tests := []struct {
		name          string
		before, after []string
		changed       string
	}{
		{"a member leaves", []string{"ao-1", "ao-2", "ao-3"}, []string{"ao-1", "ao-3"}, "ao-2"},
		{"a member joins", []string{"ao-1", "ao-2"}, []string{"ao-1", "ao-2", "ao-3"}, "ao-3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, after := NewRing(tt.before...), NewRing(tt.after...)
			moved := 0
			for _, k := range keys(300) {
				b, a := before.Preferred(k), after.Preferred(k)
				if b == a {
					continue
				}
				moved++
				if b != tt.changed && a != tt.changed {
					t.Errorf("key %s moved from %s to %s, neither of them %s", k, b, a, tt.changed)
				}
			}
			if moved == 0 {
				t.Errorf("no key moved when %s changed", tt.changed)
			}
		})
	}
}

func BenchmarkPreferred(b *testing.B) {
	r := NewRing("ao-0", "ao-1", "ao-2")
	ks := keys(300)
	for i := 0; b.Loop(); i++ {
		_ = r.Preferred(ks[i%len(ks)])
	}
}
