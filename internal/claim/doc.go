// Package claim records which operator instance drives a session, so that two
// installs of the operator (or an old and a new leader of one) never run the
// same session's tools: a coordination.k8s.io Lease per running session, in the
// session's namespace, named after its UID, held by one instance and renewed
// while it drives the session.
package claim
