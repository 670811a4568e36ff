package shard

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// Ring is a set of live members (pod names) that prefers one of them per key.
// The zero Ring has no members and prefers none.
type Ring struct {
	members []string // sorted, unique
}

// NewRing returns the ring of members (duplicates and empty names dropped).
func NewRing(members ...string) Ring {
	m := slices.DeleteFunc(slices.Clone(members), func(s string) bool { return s == "" })
	slices.Sort(m)
	return Ring{members: slices.Compact(m)}
}

// Members returns the members, sorted.
func (r Ring) Members() []string { return slices.Clone(r.members) }

// Len is the number of members.
func (r Ring) Len() int { return len(r.members) }

// Has reports whether member is in the ring.
func (r Ring) Has(member string) bool {
	_, ok := slices.BinarySearch(r.members, member)
	return ok
}

// Equal reports whether both rings have the same members.
func (r Ring) Equal(o Ring) bool { return slices.Equal(r.members, o.members) }

// Preferred is the member that key belongs to: the one with the highest
// weight(member, key) (rendezvous hashing; ties, practically impossible, go
// to the lower name). "" when the ring is empty.
func (r Ring) Preferred(key string) string {
	best, bestW := "", uint64(0)
	for _, m := range r.members {
		if w := weight(m, key); best == "" || w > bestW {
			best, bestW = m, w
		}
	}
	return best
}

// weight is a stable hash of member and key: the first 8 bytes of
// sha256(member NUL key), so every replica, whatever its version or
// architecture, computes the same.
func weight(member, key string) uint64 {
	h := sha256.New()
	h.Write([]byte(member))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}
