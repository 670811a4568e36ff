// Package shard spreads an install's sessions over its live manager replicas
// (the manager's --shard-sessions): each replica announces itself with a
// coordination.k8s.io Lease in the release namespace (Membership), and the
// replicas alive by those Leases form a Ring, which names the preferred
// replica of every key by rendezvous (highest-random-weight) hashing. Every
// replica computes the same answer from the same members, and a member that
// leaves moves only its own keys.
package shard
